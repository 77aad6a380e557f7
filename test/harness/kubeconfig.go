package harness

import (
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// writeKubeconfig writes a self-contained kubeconfig (certificates inlined)
// for one client identity against server.
func writeKubeconfig(path, server, user string, caPEM, certPEM, keyPEM []byte) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["hostlet"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}
	cfg.Contexts["hostlet"] = &clientcmdapi.Context{Cluster: "hostlet", AuthInfo: user}
	cfg.CurrentContext = "hostlet"
	return clientcmd.WriteToFile(*cfg, path)
}
