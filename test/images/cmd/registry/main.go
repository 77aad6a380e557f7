// Command registry runs a loopback registry holding hostlet's test images,
// for trying pulls by hand:
//
//	registry -addr 127.0.0.1:5000 [-user u -password p] -images DIR
//
// It builds the images into DIR (reusing archives already there), pushes
// each under its repository path without the hostlet.local domain (e.g.
// 127.0.0.1:5000/busybox:1.35), prints the pushed refs and serves until
// interrupted.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/hostlet/hostlet/test/images"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:5000", "listen address")
	user := flag.String("user", "", "require basic auth with this user")
	password := flag.String("password", "", "password for -user")
	dir := flag.String("images", "", "directory for the image archives (required)")
	flag.Parse()
	if *dir == "" || flag.NArg() > 0 || (*user == "") != (*password == "") {
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *addr, *user, *password, *dir); err != nil {
		fmt.Fprintln(os.Stderr, "registry:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, addr, user, password, dir string) error {
	imgs, err := images.BuildAll(ctx, dir)
	if err != nil {
		return err
	}
	var auth *images.BasicAuth
	if user != "" {
		auth = &images.BasicAuth{User: user, Password: password}
	}
	reg, err := images.StartRegistry(addr, auth)
	if err != nil {
		return err
	}
	defer reg.Close()
	for _, img := range imgs {
		// hostlet.local/busybox:1.35 -> busybox:1.35
		_, repoTag, _ := strings.Cut(img.Ref, "/")
		ref, err := reg.Push(ctx, img, repoTag)
		if err != nil {
			return err
		}
		fmt.Println(ref)
	}
	fmt.Fprintln(os.Stderr, "registry: serving on", reg.Addr())
	<-ctx.Done()
	return nil
}
