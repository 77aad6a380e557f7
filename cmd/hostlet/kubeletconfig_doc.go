package main

import (
	"fmt"
	"sort"
	"strings"
)

// Markers of docs/configuration.md's table of every field, which
// fieldsDoc makes from kubeletFields (TestKubeletFieldsDoc keeps it in
// step; HOSTLET_UPDATE_DOCS=1 rewrites it).
const (
	fieldsDocBegin = "<!-- every KubeletConfiguration field: generated from cmd/hostlet/kubeletconfig.go -->"
	fieldsDocEnd   = "<!-- end of the generated table -->"
)

// fieldsDoc is the markdown table of every row of kubeletFields, sorted by
// field: what hostlet does with it and, for a field it does not
// implement, why.
func fieldsDoc() string {
	rows := append([]kubeletField(nil), kubeletFields...)
	sort.Slice(rows, func(i, j int) bool { return rows[i].path < rows[j].path })
	var b strings.Builder
	b.WriteString("| field | what hostlet does |\n|---|---|\n")
	for _, f := range rows {
		var what string
		switch f.use {
		case useFlag:
			what = fmt.Sprintf("as the kubelet's, also `--%s`", f.flag)
		case useLoad, useFile:
			what = f.reason + " (in the file only: the kubelet has no flag for it either)"
		case useCheck:
			what = f.reason
		case useRefuse:
			what = "stops hostlet when set away from the kubelet's default: hostlet " + f.reason
		case useWarn:
			what = "ignored (logged when set away from the kubelet's default): hostlet " + f.reason
		}
		fmt.Fprintf(&b, "| `%s` | %s |\n", f.path, strings.ReplaceAll(what, "|", `\|`))
	}
	return b.String()
}
