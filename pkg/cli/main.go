package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// Main runs warmd's command line on the process's arguments and streams and returns its exit
// status: cmd/warmd's main is os.Exit(cli.Main()). SIGTERM and SIGINT end the command's context (a
// second one takes the default action again), and the status says how the command ended
// (exitCode).
func Main() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	// Which signal ended ctx, for the exit status (NotifyContext's cause names it only in words).
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-ctx.Done()
		// A second signal takes the default action again: a command stuck anyway still dies on the
		// second Ctrl-C. (Stop waits for the first signal's delivery to sigs.)
		stop()
		signal.Stop(sigs)
	}()
	err := NewRootCommand(Standard()).ExecuteContext(ctx)
	var sig os.Signal
	if ctx.Err() != nil {
		// Only a signal ends ctx, and it is delivered to both channels, but not at once: the
		// command may return (a read on stdin cut short) before the delivery to sigs, so wait for
		// it briefly rather than reading exit 1 where 128+signal is due.
		select {
		case sig = <-sigs:
		case <-time.After(time.Second):
		}
	}
	stop()
	return exitCode(err, sig)
}

// exitCode maps an error to the process exit status: 0 ok, 2 for bad input (usage, config), the
// code an ExitError carries, 1 otherwise; a command a signal stopped (it returned an error after
// SIGTERM or SIGINT) exits 128+signal, as a shell reports a process the signal killed. A command that
// finished cleanly after the signal (the daemon's graceful stop) exits 0.
func exitCode(err error, sig os.Signal) int {
	if err == nil {
		return 0
	}
	if s, ok := sig.(syscall.Signal); ok {
		if errors.Is(err, context.Canceled) {
			fmt.Fprintf(os.Stderr, "warmd: stopped by %s\n", signalName(s))
		} else {
			fmt.Fprintf(os.Stderr, "warmd: stopped by %s: %v\n", signalName(s), err)
		}
		return 128 + int(s)
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		if ee.Err != nil {
			fmt.Fprintln(os.Stderr, "warmd:", ee.Err)
		}
		return ee.Code
	}
	fmt.Fprintln(os.Stderr, "warmd:", err)
	return 1
}

func signalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGINT:
		return "SIGINT"
	}
	return s.String()
}
