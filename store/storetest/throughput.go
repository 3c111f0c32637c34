package storetest

import (
	"testing"
	"time"

	"github.com/nornq/norn"
)

// exerciseThroughput: the throughput history of stores that keep one
// (norn.ThroughputStore); the HTTP client does not, and skips.
func exerciseThroughput(t *testing.T, setup setupFunc) {
	t.Run("Throughput", func(t *testing.T) {
		t.Parallel()
		ts := func(t *testing.T) (norn.ThroughputStore, *testBundle) {
			s, b := setup(t)
			tps, ok := s.(norn.ThroughputStore)
			if !ok {
				t.Skip("this store keeps no throughput history")
			}
			return tps, b
		}
		base := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
		rec := func(q string, minute int, sub, comp, fail int64) norn.ThroughputRecord {
			return norn.ThroughputRecord{Queue: q, Step: time.Minute, At: base.Add(time.Duration(minute) * time.Minute),
				Submitted: sub, Completed: comp, Failed: fail}
		}
		load := func(t *testing.T, s norn.ThroughputStore, b *testBundle, queues []string, since, until time.Time) []norn.ThroughputRecord {
			t.Helper()
			got, err := s.LoadThroughput(b.ctx, queues, since, until)
			b.must(err, "LoadThroughput")
			return got
		}

		t.Run("SaveKeepsTheLargerCountAndLoadsInOrder", func(t *testing.T) {
			t.Parallel()
			s, b := ts(t)
			b.must(s.SaveThroughput(b.ctx, []norn.ThroughputRecord{rec("q", 1, 5, 2, 0), rec("", 1, 5, 2, 0), rec("q", 0, 1, 0, 0)}), "SaveThroughput")
			// Another node that counted less, or more of one series.
			b.must(s.SaveThroughput(b.ctx, []norn.ThroughputRecord{rec("q", 1, 3, 4, 0), rec("q", 1, 4, 1, 1)}), "SaveThroughput again")
			got := load(t, s, b, []string{"q"}, base, base.Add(time.Hour))
			want := []norn.ThroughputRecord{rec("q", 0, 1, 0, 0), rec("q", 1, 5, 4, 1)}
			if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
				t.Fatalf("loaded %+v, want %+v", got, want)
			}
			if all := load(t, s, b, nil, base, base.Add(time.Hour)); len(all) != 3 || all[0].Queue != "" {
				t.Fatalf("loaded every queue: %+v", all)
			}
			if none := load(t, s, b, []string{"q"}, base.Add(2*time.Minute), base.Add(time.Hour)); len(none) != 0 {
				t.Fatalf("loaded outside the range: %+v", none)
			}
			if other := load(t, s, b, []string{"q2"}, base, base.Add(time.Hour)); len(other) != 0 {
				t.Fatalf("loaded another queue: %+v", other)
			}
		})

		t.Run("CompactSumsMinutesIntoHoursOnce", func(t *testing.T) {
			t.Parallel()
			s, b := ts(t)
			b.must(s.SaveThroughput(b.ctx, []norn.ThroughputRecord{
				rec("q", 0, 1, 1, 0), rec("q", 59, 2, 0, 1), rec("q", 60, 4, 0, 0), rec("q", 125, 8, 0, 0),
			}), "SaveThroughput")
			// Minutes before 11:30 become hours; nothing before 09:00 is dropped.
			cut := base.Add(90 * time.Minute)
			b.must(s.CompactThroughput(b.ctx, cut, base.Add(-time.Hour)), "CompactThroughput")
			b.must(s.CompactThroughput(b.ctx, cut, base.Add(-time.Hour)), "CompactThroughput again")
			got := load(t, s, b, []string{"q"}, base.Add(-time.Hour), base.Add(3*time.Hour))
			want := []norn.ThroughputRecord{
				rec("q", 125, 8, 0, 0),
				{Queue: "q", Step: time.Hour, At: base, Submitted: 3, Completed: 1, Failed: 1},
				{Queue: "q", Step: time.Hour, At: base.Add(time.Hour), Submitted: 4},
			}
			if len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
				t.Fatalf("after compaction %+v, want %+v", got, want)
			}
			// A later compaction adds to an existing hour, and old hours go.
			b.must(s.SaveThroughput(b.ctx, []norn.ThroughputRecord{rec("q", 61, 16, 0, 0)}), "SaveThroughput late minute")
			b.must(s.CompactThroughput(b.ctx, cut, base.Add(time.Hour)), "CompactThroughput dropping 10:00")
			got = load(t, s, b, []string{"q"}, base.Add(-time.Hour), base.Add(3*time.Hour))
			if len(got) != 2 || got[1].Step != time.Hour || got[1].At != base.Add(time.Hour) || got[1].Submitted != 20 {
				t.Fatalf("after the second compaction %+v", got)
			}
		})

		t.Run("BadRecordsAreRefused", func(t *testing.T) {
			t.Parallel()
			s, b := ts(t)
			bad := rec("q", 0, 1, 0, 0)
			bad.At = bad.At.Add(time.Second)
			wantField(t, "a minute not on the minute", s.SaveThroughput(b.ctx, []norn.ThroughputRecord{rec("q", 1, 1, 0, 0), bad}), norn.ErrInvalidArgument, "throughput[1].at")
			neg := rec("q", 0, -1, 0, 0)
			wantField(t, "a negative count", s.SaveThroughput(b.ctx, []norn.ThroughputRecord{neg}), norn.ErrInvalidArgument, "throughput[0]")
			hour := rec("q", 0, 1, 0, 0)
			hour.Step = time.Hour
			wantField(t, "an hour", s.SaveThroughput(b.ctx, []norn.ThroughputRecord{hour}), norn.ErrInvalidArgument, "throughput[0].step")
			if got := load(t, s, b, nil, base.Add(-time.Hour), base.Add(time.Hour)); len(got) != 0 {
				t.Fatalf("a refused save stored %+v", got)
			}
		})
	})
}
