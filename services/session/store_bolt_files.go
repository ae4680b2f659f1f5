package session

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	bolt "go.etcd.io/bbolt"

	"github.com/hermes-agent/hermes/internal/boltstore"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
)

// The monolith's sessions may be spread over several files by session id (boltstore.FileOf),
// each with its own writer and group commit. One file has one writer: every durable write of
// the monolith waits for it, and at 64 turns at once it was busy most of the wall time
// (bench/README, "The next limit on many cores"). Several files commit side by side. A session's
// orchestrator records live in its file, so a turn's writes still share one commit.
//
// How many files a data directory has is fixed when its session.db is created (session.files)
// and recorded in every file, with the file's place: bLayout's filesKey holds two big-endian
// uint16, the file's index and the count. A session.db of an earlier release has no record and
// is file 0 of 1.

// MaxFiles bounds session.files.
const MaxFiles = 64

var filesKey = []byte("files")

// FileName is the name of file i in the data directory: session.db, session-1.db, …
func FileName(i int) string {
	if i == 0 {
		return "session.db"
	}
	return fmt.Sprintf("session-%d.db", i)
}

// OpenBoltFiles opens the session files in dir: session.db and, when the sessions are spread
// over n files, session-1.db to session-(n-1).db. n (1 to MaxFiles) is how many a directory
// without session.db gets; a directory with one keeps the number recorded in it. The files are
// returned in order; a session's is files[boltstore.FileOf(id, len(files))].
func OpenBoltFiles(dir string, n int) ([]*BoltStore, error) {
	if n < 1 || n > MaxFiles {
		return nil, fmt.Errorf("session.files is %d; it must be between 1 and %d", n, MaxFiles)
	}
	first := filepath.Join(dir, FileName(0))
	_, err := os.Stat(first)
	fresh := errors.Is(err, os.ErrNotExist)
	if err != nil && !fresh {
		return nil, err
	}
	var files []*BoltStore
	fail := func(err error) ([]*BoltStore, error) {
		for _, f := range files {
			_ = f.Close()
		}
		return nil, err
	}
	f, err := OpenBoltStore(first)
	if err != nil {
		return nil, err
	}
	files = append(files, f)
	if !fresh {
		n = 1 // unless the file records another number
	}
	if n, err = f.placeFile(0, n, true); err != nil {
		return fail(fmt.Errorf("%s: %w", first, err))
	}
	for i := 1; i < n; i++ {
		path := filepath.Join(dir, FileName(i))
		f, err := OpenBoltStore(path)
		if err != nil {
			return fail(err)
		}
		files = append(files, f)
		if _, err := f.placeFile(i, n, false); err != nil {
			return fail(fmt.Errorf("%s: %w", path, err))
		}
	}
	// The files share one budget of decoded messages; nothing has loaded a context yet.
	for _, f := range files {
		f.decoded = newDecodedCache(defaultDecodedBytes / n)
	}
	return files, nil
}

// placeFile records that the file is file i of n, or checks what it records. The first file
// (adopt) keeps the count it records, which is returned.
func (b *BoltStore) placeFile(i, n int, adopt bool) (int, error) {
	want := binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(nil, uint16(i)), uint16(n))
	err := b.group.Update(func(tx *bolt.Tx) error {
		v := tx.Bucket(bLayout).Get(filesKey)
		switch {
		case v == nil:
			return tx.Bucket(bLayout).Put(filesKey, want)
		case len(v) != 4:
			return fmt.Errorf("its place among the session files is malformed (%x)", v)
		}
		gotI, gotN := int(binary.BigEndian.Uint16(v)), int(binary.BigEndian.Uint16(v[2:]))
		if adopt && gotI == 0 && gotN >= 1 && gotN <= MaxFiles {
			n = gotN
			return nil
		}
		if gotI != i || gotN != n {
			return fmt.Errorf("it is file %d of %d, not file %d of %d: is it another data directory's?", gotI, gotN, i, n)
		}
		return nil
	})
	return n, err
}

// Files is the Store over the monolith's session files: each call goes to the file of its
// session; listing a user's sessions and searching them merge the files' answers into the order
// one file would give.
type Files struct {
	files []*BoltStore
}

// NewFiles returns the Store over files, as OpenBoltFiles returned them.
func NewFiles(files []*BoltStore) *Files { return &Files{files: files} }

func (f *Files) of(sid string) *BoltStore { return f.files[boltstore.FileOf(sid, len(f.files))] }

// CreateSession implements Store.
func (f *Files) CreateSession(ctx context.Context, s *sessionv1.Session) error {
	return f.of(s.GetId()).CreateSession(ctx, s)
}

// GetSession implements Store.
func (f *Files) GetSession(ctx context.Context, id string) (*sessionv1.Session, error) {
	return f.of(id).GetSession(ctx, id)
}

// ListSessions implements Store. Every file lists the index keys of a page after the cursor (the
// index key of the last session returned, the same in every file); the page is the first limit
// keys of them all, and only their sessions are read.
func (f *Files) ListSessions(ctx context.Context, userID, cursor string, limit int) ([]*sessionv1.Session, string, error) {
	prefix := append([]byte(userID), 0)
	after, ok := boltstore.ParseCursor(cursor, prefix)
	if !ok {
		return nil, "", fmt.Errorf("%w: bad page token", ErrBadCursor)
	}
	var keys [][]byte
	for _, file := range f.files {
		if err := ctx.Err(); err != nil {
			return nil, "", err
		}
		ks, err := file.userSessionKeys(prefix, after, limit+1)
		if err != nil {
			return nil, "", err
		}
		keys = append(keys, ks...)
	}
	slices.SortFunc(keys, bytes.Compare)
	more := len(keys) > limit
	keys = keys[:min(len(keys), limit)]
	out := make([]*sessionv1.Session, 0, len(keys))
	for _, k := range keys {
		sid := string(k[len(prefix)+8:])
		s, err := f.of(sid).GetSession(ctx, sid)
		if errors.Is(err, ErrNotFound) {
			continue // deleted since its key was read
		}
		if err != nil {
			return nil, "", err
		}
		out = append(out, s)
	}
	if !more || len(keys) == 0 {
		return out, "", nil
	}
	return out, hex.EncodeToString(keys[len(keys)-1]), nil
}

// DeleteSession implements Store.
func (f *Files) DeleteSession(ctx context.Context, userID, id string) (int64, error) {
	return f.of(id).DeleteSession(ctx, userID, id)
}

// Append implements Store.
func (f *Files) Append(ctx context.Context, userID, sessionID string, batch []AppendItem, expectedLastSeq *int64) (*AppendResult, error) {
	return f.of(sessionID).Append(ctx, userID, sessionID, batch, expectedLastSeq)
}

// ListMessages implements Store.
func (f *Files) ListMessages(ctx context.Context, sessionID string, afterSeq int64, limit int) ([]*sessionv1.Message, error) {
	return f.of(sessionID).ListMessages(ctx, sessionID, afterSeq, limit)
}

// LoadContext implements Store.
func (f *Files) LoadContext(ctx context.Context, sessionID string, turns, maxEvicted int) (*ContextData, error) {
	return f.of(sessionID).LoadContext(ctx, sessionID, turns, maxEvicted)
}

// AppendLoad implements Store.
func (f *Files) AppendLoad(ctx context.Context, userID, sessionID string, batch []AppendItem, expectedLastSeq *int64, turns, maxEvicted int) (*AppendResult, *ContextData, error) {
	return f.of(sessionID).AppendLoad(ctx, userID, sessionID, batch, expectedLastSeq, turns, maxEvicted)
}

// UpdateSummary implements Store.
func (f *Files) UpdateSummary(ctx context.Context, sessionID string, sum *Summary) (int64, error) {
	return f.of(sessionID).UpdateSummary(ctx, sessionID, sum)
}

// Search implements Store. Across sessions, every file answers with up to limit hits without
// their neighbours, in the order one file walks its index (session id, then seq, both
// descending); the answer is the first limit of them all in that order, and only their
// neighbours are read.
func (f *Files) Search(ctx context.Context, userID string, terms []string, sessionID string, neighbors, limit int) ([]*SearchResult, error) {
	if sessionID != "" {
		return f.of(sessionID).Search(ctx, userID, terms, sessionID, neighbors, limit)
	}
	var hits []*SearchResult
	for _, file := range f.files {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		res, err := file.Search(ctx, userID, terms, sessionID, 0, limit)
		if err != nil {
			return nil, err
		}
		hits = append(hits, res...)
	}
	slices.SortFunc(hits, func(a, b *SearchResult) int {
		if c := cmp.Compare(b.SessionID, a.SessionID); c != 0 {
			return c
		}
		return cmp.Compare(b.Message.GetSeq(), a.Message.GetSeq())
	})
	hits = hits[:min(len(hits), limit)]
	if neighbors == 0 {
		return hits, nil
	}
	out := make([]*SearchResult, 0, len(hits))
	for _, h := range hits {
		res, err := f.of(h.SessionID).searchResult(h.SessionID, h.Message.GetSeq(), neighbors, h.Matched)
		if err != nil {
			return nil, err
		}
		if res != nil { // nil: deleted since it was found
			out = append(out, res)
		}
	}
	return out, nil
}

// Close closes every file.
func (f *Files) Close() error {
	var errs []error
	for _, file := range f.files {
		errs = append(errs, file.Close())
	}
	return errors.Join(errs...)
}

// userSessionKeys returns up to limit index keys of the user's sessions (prefix: the user's id
// and 0) after after, in order.
func (b *BoltStore) userSessionKeys(prefix, after []byte, limit int) ([][]byte, error) {
	var out [][]byte
	err := b.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bUserSessions).Cursor()
		for k := boltstore.SeekPage(c, prefix, after); k != nil && bytes.HasPrefix(k, prefix) && len(out) < limit; k, _ = c.Next() {
			if len(k) >= len(prefix)+8 {
				out = append(out, bytes.Clone(k))
			}
		}
		return nil
	})
	return out, err
}

// searchResult reads a hit of Search, the message seq of sid with its neighbours; nil when the
// message is gone.
func (b *BoltStore) searchResult(sid string, seq int64, neighbors, matched int) (*SearchResult, error) {
	var res *SearchResult
	err := b.db.View(func(tx *bolt.Tx) error {
		var err error
		res, err = hitTx(tx, sid, seq, neighbors, matched)
		return err
	})
	return res, err
}
