package faulttest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/store/embedded"
)

// TestBackupKilled: kill -9 of an embedded server at random moments of
// online backups leaves everything clear: the server restarts with every
// acknowledged task, each backup directory is either absent or a whole
// backup (one that opens and holds every task acknowledged before it
// started), an unfinished one is named DIR.partial and refused as a
// backup's target and as a restore's source until removed.
func TestBackupKilled(tt *testing.T) {
	tt.Parallel()
	t := loudT(tt)
	ctx := context.Background()
	root := t.TempDir()
	n := StartNode(t, "embedded", "--store", "embedded:"+filepath.Join(root, "data"))
	var acked []string
	pad := strings.Repeat("x", 2048)
	for round := range 8 {
		batch := make([]norn.NewTask, 500)
		for i := range batch {
			batch[i] = norn.NewTask{ID: fmt.Sprintf("r%d-%03d", round, i), Queue: queue, Spec: []byte(`"` + pad + `"`)}
		}
		if _, err := n.C.Submit(ctx, batch...); err != nil {
			t.Fatal(err)
		}
		for _, nt := range batch {
			acked = append(acked, nt.ID)
		}
		dir := filepath.Join(root, fmt.Sprintf("backup%d", round))
		done := make(chan error, 1)
		go func() {
			_, err := n.C.Backup(ctx, dir)
			done <- err
		}()
		time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
		n.Kill()
		backupErr := <-done
		if err := n.Start(); err != nil {
			t.Fatal(err)
		}
		_, statErr := os.Stat(dir)
		_, partialErr := os.Stat(dir + ".partial")
		switch {
		case statErr == nil:
			checkBackup(t, dir, acked)
		case backupErr == nil:
			t.Fatalf("round %d: the backup answered success but %s does not exist", round, dir)
		case partialErr == nil:
			if _, err := n.C.Backup(ctx, dir); err == nil || !strings.Contains(err.Error(), "unfinished backup") {
				t.Fatalf("round %d: a backup into %s beside an unfinished one: %v", round, dir, err)
			}
			if err := embedded.Restore(ctx, dir+".partial", filepath.Join(root, "nope")); err == nil {
				t.Fatalf("round %d: the unfinished backup was restored", round)
			}
			if err := os.RemoveAll(dir + ".partial"); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("round %d: backup %v, directory there: %v, unfinished one there: %v", round, backupErr, statErr == nil, partialErr == nil)
		// The restarted server has everything acknowledged, and backs up.
		got, err := n.C.Count(ctx, norn.Filter{Queues: []string{queue}})
		if err != nil || got != int64(len(acked)) {
			t.Fatalf("round %d: %d tasks after the restart (%v), %d acknowledged", round, got, err, len(acked))
		}
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
			if _, err := n.C.Backup(ctx, dir); err != nil {
				t.Fatalf("round %d: a backup after the restart: %v", round, err)
			}
			checkBackup(t, dir, acked)
		}
	}
}

// checkBackup opens a backup (restored into a new directory) and checks it
// holds every task in acked.
func checkBackup(t testing.TB, dir string, acked []string) {
	t.Helper()
	ctx := context.Background()
	to := dir + "-restored"
	if err := embedded.Restore(ctx, dir, to); err != nil {
		t.Fatalf("restore of %s: %v", dir, err)
	}
	s, err := embedded.Open(ctx, embedded.Options{Dir: to, ManualSweep: true, MinFreeBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, id := range acked {
		if _, err := s.Get(ctx, id); err != nil {
			t.Fatalf("backup %s lacks %s, acknowledged before it: %v", dir, id, err)
		}
	}
}
