// Command pause is the sandbox ("infra") container of the test cluster's pods (scripts/cluster/up.sh):
// it holds the pod's namespaces open until the kubelet stops the sandbox, and, as PID 1 of a pod that
// shares its PID namespace, reaps orphaned children. The upstream registry.k8s.io/pause cannot be
// pulled here, so hack/pause/mkimage wraps this static binary into an image that up.sh imports.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for { // reap every exited child; -1: any child, WNOHANG: never block
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
