package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nornq/norn"
)

// fake serves canned answers so the client's wire handling is tested
// without a server or store.
func fake(t *testing.T, h http.HandlerFunc) *Client {
	t.Helper()
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	c, err := New(ts.URL+"/", WithToken("tok"), WithUserAgent("ua-test"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestNewRejectsBadURLs(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"", "ftp://x", "127.0.0.1:7070", "http://", "http://a b"} {
		if _, err := New(u); !errors.Is(err, norn.ErrInvalidArgument) {
			t.Errorf("New(%q) = %v, want invalid_argument", u, err)
		}
	}
}

func TestErrorsKeepCodeFieldMessage(t *testing.T) {
	t.Parallel()
	c := fake(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" || r.Header.Get("User-Agent") != "ua-test" {
			t.Errorf("headers: %v", r.Header)
		}
		switch r.URL.Path {
		case "/v1/tasks/t1/complete":
			w.WriteHeader(409)
			io.WriteString(w, `{"error":{"code":"lease_lost","message":"task \"t1\": lease 1 is not the current lease"}}`)
		case "/v1/tasks/batch":
			w.WriteHeader(400)
			io.WriteString(w, `{"error":{"code":"invalid_argument","message":"bad","field":"tasks[0].queue"}}`)
		default:
			w.WriteHeader(502)
			io.WriteString(w, `<html>bad gateway</html>`)
		}
	})
	ctx := context.Background()
	err := c.Complete(ctx, norn.LeaseRef{TaskID: "t1", Worker: "w", Lease: 1}, nil)
	if !errors.Is(err, norn.ErrLeaseLost) {
		t.Fatalf("Complete = %v, want lease_lost", err)
	}
	_, err = c.Submit(ctx, norn.NewTask{Queue: "q"})
	var ne *norn.Error
	if !errors.As(err, &ne) || ne.Code != norn.CodeInvalidArgument || ne.Field != "tasks[0].queue" || ne.Message != "bad" {
		t.Fatalf("Submit = %#v", err)
	}
	_, err = c.Stats(ctx)
	if !errors.Is(err, norn.ErrUnavailable) || !strings.Contains(err.Error(), "502") {
		t.Fatalf("Stats = %v, want unavailable mentioning 502", err)
	}
}

func TestTransportErrorIsUnavailable(t *testing.T) {
	t.Parallel()
	ts := httptest.NewServer(http.NotFoundHandler())
	url := ts.URL
	ts.Close()
	c, _ := New(url)
	_, err := c.Get(context.Background(), "x")
	if !errors.Is(err, norn.ErrUnavailable) {
		t.Fatalf("Get on a closed server = %v, want unavailable", err)
	}
	c.Close()
	if _, err := c.Get(context.Background(), "x"); !errors.Is(err, norn.ErrClosed) {
		t.Fatalf("Get after Close = %v, want closed", err)
	}
}

func TestStreamStopsAtErrorLine(t *testing.T) {
	t.Parallel()
	c := fake(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Accept") != "application/x-ndjson" || r.URL.Query().Get("limit") != "7" {
			t.Errorf("request %v %v", r.Header, r.URL)
		}
		io.WriteString(w, `{"id":"a","queue":"q","status":"ready"}`+"\n"+`{"id":"b","queue":"q","status":"ready"}`+"\n")
		io.WriteString(w, `{"error":{"code":"unavailable","message":"disk gone"}}`+"\n")
	})
	it, err := c.Stream(context.Background(), norn.Query{Limit: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	var ids []string
	for it.Next() {
		ids = append(ids, it.Item().ID)
	}
	if strings.Join(ids, ",") != "a,b" || !errors.Is(it.Err(), norn.ErrUnavailable) {
		t.Fatalf("ids %v err %v", ids, it.Err())
	}
}

func TestSubscribeParsesEventsAndCloseUnblocks(t *testing.T) {
	t.Parallel()
	c := fake(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("task") != "t1" {
			t.Errorf("query %v", r.URL.RawQuery)
		}
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, ": ping\n\nevent: TaskSubmit\ndata: {\"kind\":\"TaskSubmit\",\"task_id\":\"t1\",\"queue\":\"q\",\"status\":\"ready\",\"time\":\"2030-01-01T00:00:00Z\"}\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	s, err := c.Subscribe(context.Background(), norn.EventFilter{TaskID: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	if !s.Next() || s.Item().TaskID != "t1" || s.Item().Kind != norn.EventSubmitted {
		t.Fatalf("first event %+v err %v", s.Item(), s.Err())
	}
	done := make(chan bool)
	go func() { done <- s.Next() }()
	s.Close()
	select {
	case more := <-done:
		if more || s.Err() != nil {
			t.Fatalf("after Close: Next=%v Err=%v", more, s.Err())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not unblock Next")
	}
}

func TestClaimStretchesHTTPTimeout(t *testing.T) {
	t.Parallel()
	c, _ := New("http://127.0.0.1:1", WithHTTPClient(&http.Client{Timeout: 5 * time.Second}))
	if got := c.withTimeoutAtLeast(time.Minute).Timeout; got != time.Minute {
		t.Fatalf("stretched timeout %v", got)
	}
	if got := c.withTimeoutAtLeast(0).Timeout; got != 0 {
		t.Fatalf("stream timeout %v", got)
	}
	if c.withTimeoutAtLeast(time.Second) != c.hc {
		t.Fatal("a long enough timeout should reuse the client")
	}
}

func TestFilterValues(t *testing.T) {
	t.Parallel()
	at := time.Date(2030, 1, 2, 3, 4, 5, 6, time.FixedZone("x", 3600))
	v := QueryValues(norn.Query{Filter: norn.Filter{
		Queues: []string{"a", "b"}, Statuses: []norn.Status{norn.StatusReady, norn.StatusRunning},
		Labels: map[string]string{"k": "v:w", "a": "1"}, Owner: "worker-1", CreatedAfter: at,
	}, Limit: 5, Cursor: "c", Order: norn.OrderNewest, Summary: true})
	want := "created_after=2030-01-02T02%3A04%3A05.000000006Z&cursor=c&label=a%3A1&label=k%3Av%3Aw&limit=5&order=newest&owner=worker-1&queue=a&queue=b&status=ready%2Crunning&view=summary"
	if got := v.Encode(); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

func FuzzReadSSE(f *testing.F) {
	f.Add("event: TaskSubmit\ndata: {\"kind\":\"TaskSubmit\"}\n\n")
	f.Add(": ping\n\ndata: {}\ndata: \n\n")
	f.Add("data: nope\n\n")
	f.Add("event: x\r\ndata:{\"task_id\":\"1\",\"time\":\"2030-01-01T00:00:00Z\"}\r\n\r\n")
	f.Fuzz(func(t *testing.T, in string) {
		sc := bufio.NewScanner(strings.NewReader(in))
		for i := 0; i < 100; i++ {
			ev, err := readSSE(sc)
			if err != nil {
				if err != io.EOF && !errors.Is(err, errBadEvent) && !errors.Is(err, bufio.ErrTooLong) {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			_ = fmt.Sprint(ev)
		}
	})
}

func FuzzDecodeError(f *testing.F) {
	f.Add(409, `{"error":{"code":"lease_lost","message":"m"}}`)
	f.Add(400, `{"error":{"code":"invalid_argument","message":"m","field":"tasks[0].queue"}}`)
	f.Add(502, `<html>`)
	f.Add(404, ``)
	f.Fuzz(func(t *testing.T, status int, body string) {
		if status < 100 || status > 999 {
			return
		}
		err := decodeError(&http.Response{StatusCode: status, Body: io.NopCloser(strings.NewReader(body))})
		var ne *norn.Error
		if !errors.As(err, &ne) || ne.Code == "" {
			t.Fatalf("decodeError(%d, %q) = %#v, want a coded *norn.Error", status, body, err)
		}
	})
}

func FuzzStreamLines(f *testing.F) {
	f.Add(`{"id":"a","queue":"q"}` + "\n" + `{"error":{"code":"internal","message":"x"}}` + "\n")
	f.Add(`{"id":"a"}{"id":"b"}`)
	f.Add(`{"id":1}`)
	f.Fuzz(func(t *testing.T, body string) {
		ctx, cancel := context.WithCancel(context.Background())
		rc := io.NopCloser(strings.NewReader(body))
		it := &taskIter{ctx: ctx, cancel: cancel, body: rc, dec: json.NewDecoder(rc)}
		for i := 0; it.Next(); i++ {
			if it.Item() == nil || i > len(body) {
				t.Fatal("Next without an item, or more items than bytes")
			}
		}
		if err := it.Err(); err != nil && norn.CodeOf(err) == norn.CodeInternal && !strings.Contains(body, "internal") {
			var ne *norn.Error
			if !errors.As(err, &ne) || ne.Err == nil {
				t.Fatalf("internal error without a cause: %v", err)
			}
		}
		it.Close()
	})
}
