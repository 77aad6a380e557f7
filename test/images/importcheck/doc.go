// Package importcheck holds an opt-in test that the image archives built by
// package images import into a real containerd, through the Go client and
// through ctr, and that the images run. It lives apart so the containerd
// client is only compiled when this check is wanted.
//
//	HOSTLET_TEST_CONTAINERD=1 go test ./test/images/importcheck
//
// It needs root, and containerd, containerd-shim-runc-v2, ctr and runc in
// $HOSTLET_BIN (default ~/.cache/hostlet/bin). It starts a private
// containerd (own root, state and socket, CRI disabled) and stops it after.
package importcheck
