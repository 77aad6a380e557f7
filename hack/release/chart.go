package main

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"time"
)

// imageRepositoryRE is the one repository line of the chart's values, the
// approver image's (servingCertApprover.image.repository).
var imageRepositoryRE = regexp.MustCompile(`(?m)^(\s+repository:) .*$`)

// packageChart packages charts/hostlet with helm as hostlet-<chart
// version>.tgz in outDir: version and appVersion this release's, so the
// approver image defaults to <imageRepo>:<git version>, the release's image
// (the chart's image.tag stays empty, meaning appVersion). Helm writes each
// file with its mtime: the staged copy has every mtime at epoch, so the
// archive is the same for the same commit.
func packageChart(ctx context.Context, helm, root, work, outDir, imageRepo string, v versions, epoch time.Time) (string, error) {
	src := filepath.Join(root, "charts", "hostlet")
	stage := filepath.Join(work, "chart", "hostlet")
	var files []debFile
	if err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if rel == "values.yaml" {
			if n := len(imageRepositoryRE.FindAllIndex(data, -1)); n != 1 {
				return fmt.Errorf("%s: want one repository: line (the approver image's), found %d", p, n)
			}
			data = imageRepositoryRE.ReplaceAll(data, []byte("${1} "+imageRepo))
		}
		files = append(files, debFile{filepath.ToSlash(rel), 0o644, data})
		return nil
	}); err != nil {
		return "", err
	}
	if err := stageTree(stage, files, epoch); err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, helm, "package", stage, "--version", v.chart, "--app-version", v.git, "--destination", outDir)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("helm package: %w\n%s", err, out)
	}
	tgz := filepath.Join(outDir, "hostlet-"+v.chart+".tgz")
	if _, err := os.Stat(tgz); err != nil {
		return "", fmt.Errorf("helm package wrote no %s: %w", tgz, err)
	}
	return tgz, nil
}
