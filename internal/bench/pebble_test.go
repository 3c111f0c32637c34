package bench

import (
	"encoding/binary"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// BenchmarkRawPebble measures what the disk and Pebble allow on this
// machine, without Norn: the floor under the embedded store's strict
// figures. "sync-1" is one synced 300-byte write per op (its p50/p99 bound
// an idle submit → claim latency, which needs two synced writes);
// "batch1000" is one synced batch of 1000 records of 300 bytes (the upper
// bound of a batch-1000 submit that writes one key per task), from one and
// from four goroutines.
func BenchmarkRawPebble(b *testing.B) {
	open := func(b *testing.B) *pebble.DB {
		db, err := pebble.Open(b.TempDir(), &pebble.Options{Logger: quietPebble{b}, MemTableSize: 64 << 20}) // memtable as the embedded store
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = db.Close() })
		return db
	}
	val := make([]byte, 300)
	key := func(buf []byte, i uint64) []byte {
		buf = append(buf[:0], "t/"...)
		return binary.BigEndian.AppendUint64(buf, i)
	}
	b.Run("sync-1", func(b *testing.B) {
		db := open(b)
		lat := make([]time.Duration, 0, b.N)
		var k []byte
		b.ResetTimer()
		for i := range b.N {
			k = key(k, uint64(i))
			t0 := time.Now()
			if err := db.Set(k, val, pebble.Sync); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t0))
		}
		b.StopTimer()
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		b.ReportMetric(float64(Percentile(lat, 50).Microseconds()), "p50-µs")
		b.ReportMetric(float64(Percentile(lat, 99).Microseconds()), "p99-µs")
	})
	for _, writers := range []int{1, 4} {
		b.Run("batch1000/writers="+strconv.Itoa(writers), func(b *testing.B) {
			db := open(b)
			var next sync.Mutex
			n := 0
			b.ResetTimer()
			var wg sync.WaitGroup
			for w := 0; w < writers; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var k []byte
					for {
						next.Lock()
						if n >= b.N {
							next.Unlock()
							return
						}
						base := uint64(n) * 1000
						n++
						next.Unlock()
						batch := db.NewBatch()
						for i := range uint64(1000) {
							k = key(k, base+i)
							_ = batch.Set(k, val, nil)
						}
						if err := batch.Commit(pebble.Sync); err != nil {
							b.Error(err)
							return
						}
						_ = batch.Close()
					}
				}()
			}
			wg.Wait()
			b.ReportMetric(float64(b.N*1000)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

// quietPebble keeps Pebble's informational messages out of the benchmark
// output (which tools parse) and fails the benchmark on errors.
type quietPebble struct{ b *testing.B }

func (quietPebble) Infof(string, ...any)           {}
func (q quietPebble) Errorf(f string, args ...any) { q.b.Errorf(f, args...) }
func (q quietPebble) Fatalf(f string, args ...any) { q.b.Fatalf(f, args...) }
