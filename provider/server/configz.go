package server

import (
	"encoding/json"
	"net/http"
)

// configzHandler serves the node's configuration as the kubelet's /configz
// (component-base's configz): a JSON object of one member, "kubeletconfig",
// the effective KubeletConfiguration. Marshalled once: it does not change
// while hostlet runs.
func configzHandler(config any) http.Handler {
	b, err := json.Marshal(map[string]any{"kubeletconfig": config})
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if err != nil {
			http.Error(w, "error marshaling json: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		_, _ = w.Write(b)
	})
}
