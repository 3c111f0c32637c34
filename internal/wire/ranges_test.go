package wire

import (
	"net/url"
	"reflect"
	"testing"
	"time"

	"github.com/nornq/norn"
)

// fitsTheStores walks v and fails t for any time, duration or number a
// store cannot hold: a time outside (MinTime, MaxTime) or one that does
// not survive the embedded store's int64 nanoseconds, a duration outside
// 0..MaxDuration, an int outside 0..MaxCount, a uint64 over MaxSeq.
func fitsTheStores(t *testing.T, what string, v reflect.Value) {
	t.Helper()
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			fitsTheStores(t, what, v.Elem())
		}
		return
	case reflect.Slice, reflect.Array:
		for i := 0; i < v.Len(); i++ {
			fitsTheStores(t, what, v.Index(i))
		}
		return
	case reflect.Map:
		it := v.MapRange()
		for it.Next() {
			fitsTheStores(t, what, it.Value())
		}
		return
	}
	switch x := v.Interface().(type) {
	case time.Time:
		if !x.IsZero() && (!x.After(norn.MinTime) || !x.Before(norn.MaxTime) || !time.Unix(0, x.UnixNano()).Equal(x)) {
			t.Fatalf("%s: accepted the time %s", what, x)
		}
		return
	case norn.Duration:
		if x < 0 || x.D() > norn.MaxDuration {
			t.Fatalf("%s: accepted the duration %s", what, x)
		}
		return
	case int:
		if x < 0 || x > norn.MaxCount {
			t.Fatalf("%s: accepted the number %d", what, x)
		}
		return
	case uint64:
		if x > norn.MaxSeq {
			t.Fatalf("%s: accepted the number %d", what, x)
		}
		return
	}
	if v.Kind() == reflect.Struct {
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				fitsTheStores(t, what+"."+v.Type().Field(i).Name, v.Field(i))
			}
		}
	}
}

// FuzzDecodedValuesFitTheStores: whatever a body decoder accepts and its
// validation passes holds only times, durations and numbers every store
// can keep, so nothing reaches a store to wrap there.
func FuzzDecodedValuesFitTheStores(f *testing.F) {
	for _, s := range []string{
		`{"queue":"q","run_at":"2300-01-01T00:00:00Z"}`, `{"queue":"q","run_at":"1600-01-01T00:00:00Z"}`,
		`{"queue":"q","delay":"2562047h","timeout":"2562047h","max_runtime":"2562047h"}`,
		`{"queue":"q","max_attempts":2147483648,"retry":{"max_retries":2147483648,"base":"876001h"}}`,
		`{"queue":"q","run_at":"2199-12-31T23:59:59.999999999Z","delay":"876000h","max_attempts":2147483647}`,
		`{"priority":1,"run_at":"9999-12-31T23:59:59Z","if_version":18446744073709551615}`,
		`{"worker":"w","queues":["a"],"timeout":"2562047h"}`,
		`{"timeout":"2562047h","retention":{"completed":"2562047h"},"max_running":2147483648,"keys":{"k":{"limit":2147483648}}}`,
		`{"submit":[{"queue":"q","run_at":"2300-01-01T00:00:00Z"}],"require":[{"id":"a","version":9223372036854775808}]}`,
		`{"worker":"w","lease":9223372036854775808,"extend":"2562047h"}`,
		`{"worker":"w","lease":1,"delay":"2562047h"}`, `{"worker":"w","lease":1,"run_at":"0001-01-01T00:00:01Z"}`,
		`{"run_at":"1970-01-01T00:00:00Z","with_dependents":true}`,
		`{"name":"s","queue":"q","cron":"@hourly","timeout":"2562047h","max_attempts":2147483648}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, c := range []struct {
			v        any
			validate func(any) error
		}{
			{new(norn.NewTask), func(v any) error { return v.(*norn.NewTask).Validate() }},
			{new(Update), func(v any) error { u := v.(*Update).Domain(); return u.Validate() }},
			{new(norn.ClaimRequest), func(v any) error { return v.(*norn.ClaimRequest).Validate() }},
			{new(norn.QueueUpdate), func(v any) error { return v.(*norn.QueueUpdate).Validate() }},
			{new(Txn), func(v any) error {
				tx := v.(*Txn).Domain()
				if err := norn.ValidateBatch("submit", tx.Submit); err != nil {
					return err
				}
				for _, u := range tx.Update {
					if err := u.Update.Validate(); err != nil {
						return err
					}
				}
				for _, r := range tx.Require {
					if err := norn.ValidateSeq("version", r.Version); err != nil {
						return err
					}
				}
				return nil
			}},
			{new(HeartbeatRequest), func(v any) error {
				h := v.(*HeartbeatRequest)
				if err := norn.ValidateSeq("lease", h.Lease); err != nil {
					return err
				}
				return norn.Heartbeat{Progress: h.Progress, Extend: h.Extend}.Validate()
			}},
			{new(SnoozeRequest), func(v any) error {
				s := v.(*SnoozeRequest)
				if err := norn.ValidateSeq("lease", s.Lease); err != nil {
					return err
				}
				if err := s.Snooze.Validate(); err != nil {
					return err
				}
				return s.Snooze.ValidateRange()
			}},
			{new(RetryRequest), func(v any) error { return v.(*RetryRequest).Validate() }},
			{new(norn.Schedule), func(v any) error { _, err := v.(*norn.Schedule).Validate(); return err }},
		} {
			if DecodeStrict(b, c.v, "") != nil || c.validate(c.v) != nil {
				continue
			}
			fitsTheStores(t, reflect.TypeOf(c.v).Elem().String()+" "+string(b), reflect.ValueOf(c.v))
		}
	})
}

// FuzzParsedFiltersFitTheStores: the time filters and log positions the
// query parsers accept are within what the stores hold.
func FuzzParsedFiltersFitTheStores(f *testing.F) {
	for _, s := range []string{"created_after=2300-01-01T00:00:00Z", "created_before=1600-01-01T00:00:00Z",
		"updated_after=1970-01-01T00:00:00Z&updated_before=2199-01-01T00:00:00Z", "after=18446744073709551615",
		"since=3000-01-01T00:00:00Z", "created_after=2030-01-01T00:00:00%2B14:00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := url.ParseQuery(s)
		if err != nil {
			return
		}
		if q, err := ParseQuery(v, norn.MaxLabels, 0); err == nil {
			fitsTheStores(t, "query "+s, reflect.ValueOf(q.Filter))
		}
		if after, _, err := ParseLogParams(v); err == nil && after > norn.MaxSeq {
			t.Fatalf("log after %d accepted", after)
		}
		if _, since, err := ParseThroughputParams(v, time.Now()); err == nil {
			fitsTheStores(t, "since "+s, reflect.ValueOf(since))
		}
	})
}
