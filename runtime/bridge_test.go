package runtime

import (
	"encoding/json"
	"testing"

	"github.com/containernetworking/cni/libcni"
)

func TestBridgeConfList(t *testing.T) {
	type ipam struct {
		Type    string                `json:"type"`
		Ranges  [][]map[string]string `json:"ranges"`
		Routes  []map[string]string   `json:"routes"`
		DataDir string                `json:"dataDir"`
	}
	type plugin struct {
		Type      string `json:"type"`
		Bridge    string `json:"bridge"`
		IsGateway bool   `json:"isGateway"`
		IPAM      ipam   `json:"ipam"`
	}
	for _, tc := range []struct {
		name          string
		cidrs         []string
		ranges, dests []string
	}{
		{"one CIDR", []string{"10.244.3.0/24"}, []string{"10.244.3.0/24"}, []string{"0.0.0.0/0"}},
		{"dual-stack", []string{"10.244.3.0/24", "fd00:10:244:3::/64"},
			[]string{"10.244.3.0/24", "fd00:10:244:3::/64"}, []string{"0.0.0.0/0", "::/0"}},
		{"IPv6 first", []string{"fd00::/64", "10.1.0.0/24"}, []string{"fd00::/64", "10.1.0.0/24"}, []string{"::/0", "0.0.0.0/0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := BridgeConfList("cbr0", tc.cidrs, "/var/lib/cni/networks")
			if err != nil {
				t.Fatal(err)
			}
			list, err := libcni.ConfListFromBytes(b)
			if err != nil {
				t.Fatalf("not a valid conflist: %v\n%s", err, b)
			}
			if len(list.Plugins) != 2 || list.Plugins[1].Network.Type != "portmap" || !list.Plugins[1].Network.Capabilities["portMappings"] {
				t.Fatalf("plugins %d, want the bridge and portmap with portMappings\n%s", len(list.Plugins), b)
			}
			var p plugin
			if err := json.Unmarshal(list.Plugins[0].Bytes, &p); err != nil {
				t.Fatal(err)
			}
			if p.Type != "bridge" || p.Bridge != "cbr0" || !p.IsGateway || p.IPAM.Type != "host-local" || p.IPAM.DataDir != "/var/lib/cni/networks" {
				t.Errorf("plugin %+v", p)
			}
			if len(p.IPAM.Ranges) != len(tc.ranges) || len(p.IPAM.Routes) != len(tc.dests) {
				t.Fatalf("ranges %v routes %v", p.IPAM.Ranges, p.IPAM.Routes)
			}
			for i, r := range tc.ranges {
				// One range set per CIDR: host-local gives the pod one address of each.
				if len(p.IPAM.Ranges[i]) != 1 || p.IPAM.Ranges[i][0]["subnet"] != r {
					t.Errorf("range %d = %v, want %s", i, p.IPAM.Ranges[i], r)
				}
			}
			for i, d := range tc.dests {
				if p.IPAM.Routes[i]["dst"] != d {
					t.Errorf("route %d = %v, want %s", i, p.IPAM.Routes[i], d)
				}
			}
		})
	}
	for _, bad := range [][]string{nil, {"10.0.0.0/24", "10.1.0.0/24"}, {"nonsense"}, {"10.0.0.0/24", "fd00::/64", "10.1.0.0/24"}} {
		if _, err := BridgeConfList("cbr0", bad, "/d"); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}
