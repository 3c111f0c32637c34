package faulttest

import (
	"bufio"
	"errors"
	"net"
	"testing"
	"time"
)

// echo starts a line echo server and returns its address.
func echo(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					if _, err := c.Write([]byte(sc.Text() + "\n")); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// roundTrip sends a line and returns how long the answer took, or an error.
func roundTrip(c net.Conn, r *bufio.Reader, within time.Duration) (time.Duration, error) {
	start := time.Now()
	_ = c.SetDeadline(start.Add(within))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return 0, err
	}
	if _, err := r.ReadString('\n'); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestProxy(tt *testing.T) {
	t := loudT(tt)
	p, err := NewProxy(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	dial := func() (net.Conn, *bufio.Reader) {
		// A loaded machine has refused a loopback connect now and then
		// (ephemeral ports in TIME_WAIT from the rest of the suite, a full
		// accept queue); that is not what this test is about. Retry for
		// as long as a loaded CI machine may need, not a quarter second.
		var c net.Conn
		var err error
		pause := 20 * time.Millisecond
		for deadline := time.Now().Add(20 * time.Second); ; {
			if c, err = net.DialTimeout("tcp", p.Addr(), 10*time.Second); err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(pause)
			pause = min(2*pause, time.Second)
		}
		if err != nil {
			t.Fatalf("dial the proxy: %v", err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}
	// Waits for an answer that must come are generous (a loaded machine
	// may not schedule the proxy for seconds; they cost nothing when it
	// comes); waits for an answer that must not come are short, since
	// they end in a timeout either way.
	const answer = 30 * time.Second
	c, r := dial()
	if _, err := roundTrip(c, r, answer); err != nil {
		t.Fatalf("forwarding: %v", err)
	}

	p.Delay(200 * time.Millisecond)
	if d, err := roundTrip(c, r, answer); err != nil || d < 400*time.Millisecond {
		t.Fatalf("delay 200ms each way: round trip %v, %v", d, err)
	}
	p.Heal()
	if _, err := roundTrip(c, r, answer); err != nil {
		t.Fatalf("after the delay healed: %v", err)
	}

	p.Blackhole()
	if _, err := roundTrip(c, r, 300*time.Millisecond); !isTimeout(err) {
		t.Fatalf("through the blackhole: %v, want silence (a timeout)", err)
	}
	p.Heal()
	// The line sent into the hole arrives now; the connection survived.
	c2, r2 := dial()
	if _, err := roundTrip(c2, r2, answer); err != nil {
		t.Fatalf("after heal: %v", err)
	}

	// A cut is a reset, not silence: the wait is long so that on a loaded
	// machine a timeout cannot pass for the reset.
	p.Cut()
	if _, err := roundTrip(c2, r2, answer); err == nil || isTimeout(err) {
		t.Fatalf("a cut connection: %v, want it reset", err)
	}
	c3, r3 := dial() // accepted, then reset
	if _, err := roundTrip(c3, r3, answer); err == nil || isTimeout(err) {
		t.Fatalf("a new connection while cut: %v, want it reset", err)
	}
	p.Heal()
	c4, r4 := dial()
	if _, err := roundTrip(c4, r4, answer); err != nil {
		t.Fatalf("after heal: %v", err)
	}
}
