package sandboxinit

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// NetEnv, set to NetPrepared in an init's environment, says the launcher
// started it in a network namespace made ahead, with lo already up.
const (
	NetEnv      = "RLHOST_LOCAL_SANDBOX_NET"
	NetPrepared = "prepared"
)

// preparedNet makes each sandbox's network namespace before the sandbox is
// asked for. A new network namespace is the dearest part of an init's
// clone (as dear as the user namespace and its id maps together), and
// nothing in it depends on the sandbox. So after each
// launch the forking thread moves itself into a fresh namespace and brings
// its lo up; the next init is cloned without CLONE_NEWNET and inherits that
// namespace from the thread. Network namespaces are per thread, so the
// launcher's other threads stay where they are.
//
// The namespace belongs to the launcher's user namespace instead of the
// sandbox's, which takes nothing from the sandbox's isolation: it is as
// private as one the init would make, and the sandbox holds no capability
// over it (commands hold none anyway), so it cannot reconfigure it.
//
// It must be used from the one locked thread that forks the inits.
type preparedNet struct {
	host     int   // the launcher's own network namespace, for Network inits
	ready    bool  // the thread is in a fresh namespace, lo up, no init in it
	failed   error // a preparation that failed for good; inits then make their own
	reported bool  // a failure was returned once already
}

func newPreparedNet() (*preparedNet, error) {
	fd, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open the launcher's network namespace: %w", err)
	}
	return &preparedNet{host: fd}, nil
}

// prepare moves the thread into a new network namespace with lo up, unless
// it is in one already. Until one is ready, each init makes its own, as
// without a launcher. A shortage (memory, or the user.max_net_namespaces
// limit) is tried again after the next launch; any other failure ends the
// preparing. Only the first failure is returned, for the log.
func (p *preparedNet) prepare() error {
	if p.ready || p.failed != nil {
		return nil
	}
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		err = fmt.Errorf("make a network namespace ahead: %w", err)
		if !errors.Is(err, unix.ENOMEM) && !errors.Is(err, unix.ENOSPC) {
			p.failed = err
		}
		return p.report(err)
	}
	// The thread has left whatever namespace it was in, so a failure here
	// leaves it in one no init will get: the next one is cloned into its
	// own.
	if err := loopbackUp(); err != nil {
		p.failed = fmt.Errorf("network namespace made ahead: %w", err)
		return p.report(p.failed)
	}
	p.ready = true
	return nil
}

func (p *preparedNet) report(err error) error {
	if p.reported {
		return nil
	}
	p.reported = true
	return err
}

// take readies the thread for cloning one init and says whether the clone
// must make a network namespace (newNet) and whether the init gets the
// prepared one. An init that shares the host's network is cloned from the
// host's namespace; the prepared one is then dropped.
func (p *preparedNet) take(network bool) (newNet, prepared bool, err error) {
	if network {
		if err := unix.Setns(p.host, unix.CLONE_NEWNET); err != nil {
			return false, false, fmt.Errorf("return to the host's network namespace: %w", err)
		}
		p.ready = false
		return false, false, nil
	}
	if p.ready {
		// Spent even if the clone fails: no namespace is given twice.
		p.ready = false
		return false, true, nil
	}
	return true, false, nil
}
