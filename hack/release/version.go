package main

import (
	"fmt"
	"regexp"
	"strings"
)

// versions is one release's version in the forms each artifact needs.
type versions struct {
	// git is version.sh's: v1.2.0, v1.2.0-3-g<sha>, v0.0.0-354-g<sha>,
	// each maybe -dirty. hostlet version prints it; it is the image's tag
	// and the chart's appVersion (so the chart's default image is this
	// release's).
	git string
	// deb orders as dpkg must for upgrades: a build n commits after a tag
	// comes after the tag (1.2.0+3.g<sha>), a pre-release before its
	// release (1.2.0~rc.1).
	deb string
	// chart is SemVer 2, which Helm requires: the git form without its v.
	chart string
}

var (
	// distanceRE is git describe's suffix for a commit after the tag.
	distanceRE = regexp.MustCompile(`^(.*)-([0-9]+)-g([0-9a-f]{7,40})$`)
	// tagRE is a release tag: vMAJOR.MINOR.PATCH and an optional
	// pre-release without hyphens (v1.2.0-rc.1), so the describe suffix
	// stays unambiguous.
	tagRE = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(?:-([0-9A-Za-z]+(?:\.[0-9A-Za-z]+)*))?$`)
	// imageTagRE is what a registry accepts as a tag.
	imageTagRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)
)

// parseVersion derives the package and chart versions from git's.
func parseVersion(git string) (versions, error) {
	bad := func(why string) (versions, error) {
		return versions{}, fmt.Errorf("version %q: %s (want what hack/release/version.sh prints: v1.2.0, v1.2.0-3-g<sha>, v0.0.0-354-g<sha>, maybe -dirty)", git, why)
	}
	if !imageTagRE.MatchString(git) {
		return bad("not usable as an image tag")
	}
	rest, dirty := strings.CutSuffix(git, "-dirty")
	var distance, sha string
	if m := distanceRE.FindStringSubmatch(rest); m != nil {
		rest, distance, sha = m[1], m[2], m[3]
	}
	m := tagRE.FindStringSubmatch(rest)
	if m == nil {
		return bad("no vMAJOR.MINOR.PATCH tag")
	}
	deb := m[1] + "." + m[2] + "." + m[3]
	if m[4] != "" {
		deb += "~" + m[4]
	}
	var local []string
	if distance != "" {
		local = append(local, distance, "g"+sha)
	}
	if dirty {
		local = append(local, "dirty")
	}
	if len(local) > 0 {
		deb += "+" + strings.Join(local, ".")
	}
	return versions{git: git, deb: deb, chart: strings.TrimPrefix(git, "v")}, nil
}
