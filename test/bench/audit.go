package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The apiserver's request metrics are not per user; its audit log is. The
// policy logs one line (at ResponseComplete) per write of the two node
// identities and nothing else.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  users: [%s]
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: None
`

// auditLog is the node-write log the apiserver keeps for this run.
type auditLog struct{ policy, path string }

func newAuditLog(dir string, nodes ...string) (*auditLog, error) {
	var users []string
	for _, n := range nodes {
		users = append(users, fmt.Sprintf("%q", "system:node:"+n))
	}
	a := &auditLog{policy: filepath.Join(dir, "audit-policy.yaml"), path: filepath.Join(dir, "audit.log")}
	return a, os.WriteFile(a.policy, []byte(fmt.Sprintf(auditPolicy, strings.Join(users, ", "))), 0o644)
}

// apiserverArgs turns the log on (the log backend writes synchronously, so
// a write is in the file by the time its response is sent).
func (a *auditLog) apiserverArgs() []string {
	return []string{"--audit-policy-file=" + a.policy, "--audit-log-path=" + a.path, "--audit-log-format=json"}
}

// writes counts node's writes that completed in [from, to), in total and
// per resource ("pods/status", "leases", "events", ...).
func (a *auditLog) writes(node string, from, to time.Time) (int, map[string]int, error) {
	f, err := os.Open(a.path)
	if err != nil {
		return 0, nil, err
	}
	defer f.Close()
	user := "system:node:" + node
	total, by := 0, map[string]int{}
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		var ev struct {
			User struct {
				Username string `json:"username"`
			} `json:"user"`
			Verb      string `json:"verb"`
			ObjectRef *struct {
				Resource    string `json:"resource"`
				Subresource string `json:"subresource"`
			} `json:"objectRef"`
			StageTimestamp time.Time `json:"stageTimestamp"`
		}
		if err := json.Unmarshal(s.Bytes(), &ev); err != nil {
			return 0, nil, fmt.Errorf("%s: %w", a.path, err)
		}
		if ev.User.Username != user || ev.StageTimestamp.Before(from) || !ev.StageTimestamp.Before(to) {
			continue
		}
		res := "?"
		if ev.ObjectRef != nil {
			res = ev.ObjectRef.Resource
			if ev.ObjectRef.Subresource != "" {
				res += "/" + ev.ObjectRef.Subresource
			}
		}
		total++
		by[ev.Verb+" "+res]++
	}
	return total, by, s.Err()
}
