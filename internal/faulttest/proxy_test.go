package faulttest

import (
	"bufio"
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

func TestProxy(tt *testing.T) {
	t := loudT(tt)
	p, err := NewProxy(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	dial := func() (net.Conn, *bufio.Reader) {
		// A loaded machine has refused a loopback connect now and then;
		// that is not what this test is about.
		var c net.Conn
		var err error
		for try := 0; try < 5; try++ {
			if c, err = net.Dial("tcp", p.Addr()); err == nil {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}
	c, r := dial()
	if _, err := roundTrip(c, r, 5*time.Second); err != nil {
		t.Fatalf("forwarding: %v", err)
	}

	p.Delay(200 * time.Millisecond)
	if d, err := roundTrip(c, r, 5*time.Second); err != nil || d < 400*time.Millisecond {
		t.Fatalf("delay 200ms each way: round trip %v, %v", d, err)
	}
	p.Heal()
	if _, err := roundTrip(c, r, 5*time.Second); err != nil {
		t.Fatal(err)
	}

	p.Blackhole()
	if _, err := roundTrip(c, r, 300*time.Millisecond); err == nil {
		t.Fatal("an answer came through the blackhole")
	}
	p.Heal()
	// The line sent into the hole arrives now; the connection survived.
	c2, r2 := dial()
	if _, err := roundTrip(c2, r2, 5*time.Second); err != nil {
		t.Fatalf("after heal: %v", err)
	}

	p.Cut()
	if _, err := roundTrip(c2, r2, 2*time.Second); err == nil {
		t.Fatal("a cut connection still answers")
	}
	c3, r3 := dial() // accepted, then reset
	if _, err := roundTrip(c3, r3, 2*time.Second); err == nil {
		t.Fatal("a new connection works while cut")
	}
	p.Heal()
	c4, r4 := dial()
	if _, err := roundTrip(c4, r4, 5*time.Second); err != nil {
		t.Fatalf("after heal: %v", err)
	}
}
