// Command pause is the pod sandbox ("infra") process of the local cluster's
// pause image. It holds the pod's namespaces open and does nothing else: it
// exits on SIGINT/SIGTERM and, as PID 1 of a shared process namespace, reaps
// orphaned children so they do not linger as zombies.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			return
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
