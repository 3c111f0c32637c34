package faulttest

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards TCP connections to a target (a node's connections to
// PostgreSQL) and lets the test break them: Cut resets every connection and
// refuses new ones, Blackhole keeps connections open but forwards nothing
// (a partition neither side notices), Delay adds latency to every chunk in
// both directions without throttling throughput.
type Proxy struct {
	ln     net.Listener
	target string

	delay atomic.Int64 // nanoseconds added to every chunk

	mu    sync.Mutex
	cut   bool          // refuse and reset
	hole  chan struct{} // non-nil while blackholed: closed by Heal
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// NewProxy listens on a free loopback port and forwards to target.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the host:port clients connect to.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut resets every open connection and refuses new ones until Heal.
func (p *Proxy) Cut() {
	p.mu.Lock()
	p.cut = true
	for c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // RST, not FIN: like a middlebox dropping state
		}
		_ = c.Close()
	}
	p.mu.Unlock()
}

// Blackhole stops forwarding on every connection, open or new, until Heal:
// packets vanish, nobody gets an error.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	if p.hole == nil {
		p.hole = make(chan struct{})
	}
	p.mu.Unlock()
}

// Delay adds d of latency to everything forwarded from now on.
func (p *Proxy) Delay(d time.Duration) { p.delay.Store(int64(d)) }

// Heal ends Cut, Blackhole and Delay.
func (p *Proxy) Heal() {
	p.delay.Store(0)
	p.mu.Lock()
	p.cut = false
	if p.hole != nil {
		close(p.hole)
		p.hole = nil
	}
	p.mu.Unlock()
}

// Close stops listening and closes every connection.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	if p.hole != nil {
		close(p.hole)
		p.hole = nil
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

// gate blocks while the proxy is blackholed; false once done is closed.
func (p *Proxy) gate(done <-chan struct{}) bool {
	for {
		p.mu.Lock()
		h := p.hole
		p.mu.Unlock()
		if h == nil {
			return true
		}
		select {
		case <-h:
		case <-done:
			return false
		}
	}
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(in) {
			if tc, ok := in.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			_ = in.Close()
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.serve(in)
		}()
	}
}

func (p *Proxy) serve(in net.Conn) {
	defer p.untrack(in)
	done := make(chan struct{})
	if !p.gate(done) {
		return
	}
	out, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		return
	}
	if !p.track(out) {
		_ = out.Close()
		return
	}
	defer p.untrack(out)
	var once sync.Once
	stop := func() {
		once.Do(func() {
			close(done)
			_ = in.Close()
			_ = out.Close()
		})
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(out, in, done); stop() }()
	go func() { defer wg.Done(); p.pipe(in, out, done); stop() }()
	wg.Wait()
}

type chunk struct {
	b  []byte
	at time.Time // when it may be written
}

// pipe copies src to dst: a reader stamps each chunk with its release time
// (now + delay) and a writer releases chunks in order at that time, so a
// delay adds latency without capping throughput.
func (p *Proxy) pipe(dst io.Writer, src io.Reader, done <-chan struct{}) {
	q := make(chan chunk, 64)
	go func() {
		defer close(q)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				select {
				case q <- chunk{buf[:n], time.Now().Add(time.Duration(p.delay.Load()))}:
				case <-done:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range q {
		if d := time.Until(c.at); d > 0 {
			select {
			case <-time.After(d):
			case <-done:
				return
			}
		}
		if !p.gate(done) {
			return
		}
		if _, err := dst.Write(c.b); err != nil {
			return
		}
	}
}
