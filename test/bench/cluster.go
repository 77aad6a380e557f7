package main

import (
	"context"
	"fmt"
	"net"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hostlet/hostlet/test/harness"
)

// createNamespace creates ns and waits for its default ServiceAccount, which
// pods need before they are admitted.
func createNamespace(ctx context.Context, c *harness.Cluster, ns string) error {
	cs := c.Client()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("namespace %s: no default ServiceAccount: %w", ns, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// deleteLeftovers deletes the pods still in the targets' namespaces and
// waits (bounded) until their nodes have removed them.
func deleteLeftovers(c *harness.Cluster, targets []target) error {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cs := c.Client()
	for _, t := range targets {
		if err := cs.CoreV1().Pods(t.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			return err
		}
	}
	for _, t := range targets {
		for {
			l, err := cs.CoreV1().Pods(t.ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return fmt.Errorf("%s: %w", t.ns, err)
			}
			if len(l.Items) == 0 {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s: %d pods not gone", t.ns, len(l.Items))
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
