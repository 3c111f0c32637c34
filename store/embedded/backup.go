package embedded

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nornq/norn"
)

// partialSuffix names a backup being written: the directory is renamed to
// its name only once complete, so a crash during a backup leaves a
// directory whose name says it is unfinished, never one that looks whole.
const partialSuffix = ".partial"

// Backup writes a consistent copy of the store into dir while it serves
// (norn.Backuper): Pebble's checkpoint of the data directory (table files
// hard-linked where the file system allows, the write-ahead log and the
// manifest copied up to one instant), after a sync, so the copy holds
// every write acknowledged before the call, in either durability mode.
// A transaction is one Pebble batch, so the copy has each one whole or not
// at all. dir must not exist; its parent must, and the copy is written
// into dir.partial first, then renamed.
func (s *Store) Backup(ctx context.Context, dir string) (norn.BackupInfo, error) {
	if err := s.enter(); err != nil {
		return norn.BackupInfo{}, err
	}
	defer s.exit()
	dest, err := backupDest(s.opts.Dir, dir)
	if err != nil {
		return norn.BackupInfo{}, err
	}
	info := norn.BackupInfo{Dir: dest, Started: time.Now().UTC()}
	s.mu.Lock()
	failed := s.failed
	s.mu.Unlock()
	if failed == nil {
		if err := s.syncWAL(); err != nil {
			return norn.BackupInfo{}, writeErr(err)
		}
	}
	tmp := dest + partialSuffix
	if err := s.db.Checkpoint(tmp); err != nil {
		_ = os.RemoveAll(tmp)
		return norn.BackupInfo{}, fmt.Errorf("embedded: backup into %s: %w", tmp, err)
	}
	if err := syncDir(tmp); err != nil {
		return norn.BackupInfo{}, err
	}
	if err := os.Rename(tmp, dest); err != nil {
		return norn.BackupInfo{}, fmt.Errorf("embedded: backup: %w", err)
	}
	if err := syncDir(filepath.Dir(dest)); err != nil {
		return norn.BackupInfo{}, err
	}
	info.Bytes, err = dirSize(dest)
	if err != nil {
		return norn.BackupInfo{}, err
	}
	info.Took = norn.Duration(time.Since(info.Started))
	return info, nil
}

// backupDest checks a backup's directory: absolute, new, with a parent,
// outside the data directory, and with no unfinished backup in the way.
func backupDest(dataDir, dir string) (string, error) {
	if strings.TrimSpace(dir) == "" {
		return "", norn.Invalid("dir", "a backup directory is required")
	}
	dest, err := filepath.Abs(dir)
	if err != nil {
		return "", norn.Invalid("dir", "%v", err)
	}
	data, err := filepath.Abs(dataDir)
	if err != nil {
		return "", err
	}
	if within(dest, data) || within(data, dest) {
		return "", norn.Invalid("dir", "%s is inside the data directory %s (or holds it): a backup goes elsewhere", dest, data)
	}
	if _, err := os.Stat(dest); err == nil {
		return "", norn.Invalid("dir", "%s exists: a backup goes into a directory that does not exist yet", dest)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", norn.Invalid("dir", "%v", err)
	}
	if _, err := os.Stat(dest + partialSuffix); err == nil {
		return "", norn.Invalid("dir", "%s%s is an unfinished backup (a crash or an error cut it short): remove it first", dest, partialSuffix)
	}
	if fi, err := os.Stat(filepath.Dir(dest)); err != nil || !fi.IsDir() {
		return "", norn.Invalid("dir", "the parent of %s is not a directory that exists", dest)
	}
	return dest, nil
}

// within reports whether path is dir or below it.
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func dirSize(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err == nil {
			n += fi.Size()
		}
		return err
	})
	return n, err
}

// Restore copies the backup in from into the new data directory to (which
// must not exist; its parent must) and checks that it opens. A backup can
// also be opened as a data directory as it is; Restore leaves it untouched
// for another restore.
func Restore(ctx context.Context, from, to string) error {
	src, err := filepath.Abs(from)
	if err != nil {
		return norn.Invalid("backup", "%v", err)
	}
	if strings.HasSuffix(src, partialSuffix) {
		return norn.Invalid("backup", "%s is an unfinished backup: it cannot be restored", src)
	}
	if m, _ := filepath.Glob(filepath.Join(src, "marker.manifest.*")); len(m) == 0 {
		return norn.Invalid("backup", "%s is not a backup of the embedded store (no manifest marker)", src)
	}
	dest, err := filepath.Abs(to)
	if err != nil {
		return norn.Invalid("dir", "%v", err)
	}
	if _, err := os.Stat(dest); err == nil {
		return norn.Invalid("dir", "%s exists: restore into a directory that does not exist yet (a running server's data directory is never overwritten)", dest)
	}
	tmp := dest + partialSuffix
	if _, err := os.Stat(tmp); err == nil {
		return norn.Invalid("dir", "%s is an unfinished restore: remove it first", tmp)
	}
	if err := copyTree(src, tmp); err != nil {
		_ = os.RemoveAll(tmp)
		return fmt.Errorf("embedded: restore: %w", err)
	}
	s, err := Open(ctx, Options{Dir: tmp, ManualSweep: true, MinFreeBytes: -1})
	if err != nil {
		_ = os.RemoveAll(tmp)
		return fmt.Errorf("embedded: the restored copy does not open: %w", err)
	}
	if err := s.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, dest); err != nil {
		return err
	}
	return syncDir(filepath.Dir(dest))
}

// copyTree copies the regular files of src into the new directory dst,
// syncing each.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.Mkdir(target, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		if err := out.Sync(); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
}
