package session

import (
	"bytes"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// A session's bucket (s/<sid>) holds four kinds of keys, each under a one-byte prefix:
//
//	c client_id → seq (8 bytes)   k seq → nil (sticky)   m seq → Message   t seq → nil (user turn)
//
// They were four nested buckets until layout 2. One B-tree costs a commit fewer pages: each
// nested bucket a turn wrote cost its own leaf and the branches above it, and the session
// bucket's leaf that holds their headers; one tree costs the leaves the keys land in and the
// branches above them, up to one shared root (bench/README, issue 25, stop 44).
const (
	partClientIDs byte = 'c'
	partSticky    byte = 'k'
	partMsgs      byte = 'm'
	partTurns     byte = 't'
)

// part is one kind of key in a session's bucket: its keys are the bucket's under the prefix p,
// without it.
type part struct {
	b *bolt.Bucket
	p byte
}

func (p part) key(k []byte) []byte {
	pk := make([]byte, 1+len(k))
	pk[0] = p.p
	copy(pk[1:], k)
	return pk
}

// Get returns k's value, nil when absent.
func (p part) Get(k []byte) []byte { return p.b.Get(p.key(k)) }

// Put sets k's value (bbolt copies the key; v must stay unchanged until the commit).
func (p part) Put(k, v []byte) error { return p.b.Put(p.key(k), v) }

// Cursor returns a cursor over the part's keys, in order.
func (p part) Cursor() partCursor { return partCursor{c: p.b.Cursor(), p: p.p} }

// partCursor is a bolt.Cursor that sees one part's keys; each move returns nil, nil past them.
type partCursor struct {
	c *bolt.Cursor
	p byte
}

func (c partCursor) own(k, v []byte) ([]byte, []byte) {
	if len(k) < 2 || k[0] != c.p {
		return nil, nil
	}
	return k[1:], v
}

// seek moves to the part's first key at or after pk, a key with the part's prefix. The key that
// is the prefix alone (a nested bucket of layout 1, while a session moves) is not the part's.
func (c partCursor) seek(pk []byte) ([]byte, []byte) {
	k, v := c.c.Seek(pk)
	if len(k) == 1 && k[0] == c.p {
		k, v = c.c.Next()
	}
	return c.own(k, v)
}

// First moves to the part's first key.
func (c partCursor) First() ([]byte, []byte) { return c.seek([]byte{c.p}) }

// Last moves to the part's last key.
func (c partCursor) Last() ([]byte, []byte) {
	if c.p == 0xff {
		return c.own(c.c.Last())
	}
	k, _ := c.c.Seek([]byte{c.p + 1})
	if k == nil {
		return c.own(c.c.Last())
	}
	return c.own(c.c.Prev())
}

// Seek moves to the part's first key at or after k.
func (c partCursor) Seek(k []byte) ([]byte, []byte) {
	return c.seek(part{p: c.p}.key(k))
}

// Next moves to the part's next key.
func (c partCursor) Next() ([]byte, []byte) { return c.own(c.c.Next()) }

// Prev moves to the part's previous key.
func (c partCursor) Prev() ([]byte, []byte) { return c.own(c.c.Prev()) }

// sessionParts are a session's parts, in its bucket sb.
type sessionParts struct {
	msgs, cids, turns, sticky part
}

func partsOf(sb *bolt.Bucket) sessionParts {
	return sessionParts{
		msgs:   part{sb, partMsgs},
		cids:   part{sb, partClientIDs},
		turns:  part{sb, partTurns},
		sticky: part{sb, partSticky},
	}
}

// The file records its layout in bLayout, under layoutKey: 2 is the sessions' buckets one tree
// each (above), 3 is that with the search postings in lists (store_bolt_postings.go). A release
// refuses a file of a later layout, so an older one does not open a file whose postings it
// would not find.
var (
	bLayout     = []byte("layout")
	layoutKey   = []byte("sessions")
	layout2     = []byte{2}
	layoutValue = []byte{3}
	// oldParts are layout 1's nested buckets and the prefixes their keys move under.
	oldParts = []struct {
		name []byte
		p    byte
	}{{[]byte("m"), partMsgs}, {[]byte("c"), partClientIDs}, {[]byte("t"), partTurns}, {[]byte("k"), partSticky}}
)

// migrateBytes bounds the data one transaction of the migration moves, so that a large file is
// moved in commits of a bounded size (a session is never split across two).
const migrateBytes = 16 << 20

// migrateLayout moves the sessions of a file of layout 1 into layout 2, in transactions of about
// migrateBytes, and records layout 2; then the search postings of layout 2 into layout 3
// (migrateIndex). A crash part way leaves each session in one layout or the other (a session
// moves in one transaction); the next open goes on where it stopped.
func migrateLayout(db *bolt.DB) error {
	var v []byte
	var old [][]byte
	if err := db.View(func(tx *bolt.Tx) error {
		v = bytes.Clone(tx.Bucket(bLayout).Get(layoutKey))
		if v != nil && !bytes.Equal(v, layout2) && !bytes.Equal(v, layoutValue) {
			// A later release's layout: moving "layout 1" sessions out of it would be a guess.
			return fmt.Errorf("the sessions are in layout %x, which this release does not read", v)
		}
		if v == nil {
			old = oldSessionBuckets(tx)
		}
		return nil
	}); err != nil || bytes.Equal(v, layoutValue) {
		return err
	}
	for v == nil {
		var err error
		if old, err = migrateBatch(db, migrateBytes, old); err != nil {
			return err
		}
		if old == nil {
			v = layout2
		}
	}
	return migrateIndex(db, migrateIndexKeys)
}

// oldSessionBuckets returns the names of the session buckets of layout 1 in tx.
func oldSessionBuckets(tx *bolt.Tx) [][]byte {
	prefix := []byte("s/")
	var old [][]byte
	c := tx.Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		if v == nil && hasOldParts(tx.Bucket(k)) {
			old = append(old, bytes.Clone(k))
		}
	}
	return old
}

// migrateBatch moves the sessions named in old, in one transaction, until limit bytes moved, and
// returns those left; when none is, it has recorded layout 2 and returns nil. Nothing else
// writes the file while it opens, so the names found once stay the ones to move.
func migrateBatch(db *bolt.DB, limit int, old [][]byte) (left [][]byte, err error) {
	err = db.Update(func(tx *bolt.Tx) error {
		moved := 0
		for i, name := range old {
			if moved >= limit {
				left = old[i:]
				return nil
			}
			n, err := migrateSession(tx.Bucket(name))
			if err != nil {
				return fmt.Errorf("session bucket %s: %w", name, err)
			}
			moved += n
		}
		return tx.Bucket(bLayout).Put(layoutKey, layout2)
	})
	if err != nil {
		return nil, err
	}
	return left, nil
}

// hasOldParts reports whether sb, a session's bucket, holds a nested bucket of layout 1.
func hasOldParts(sb *bolt.Bucket) bool {
	for _, o := range oldParts {
		if sb.Bucket(o.name) != nil {
			return true
		}
	}
	return false
}

// migrateSession moves one session's nested buckets into prefixed keys of sb and returns the
// bytes it moved.
func migrateSession(sb *bolt.Bucket) (int, error) {
	moved := 0
	for _, o := range oldParts {
		nb := sb.Bucket(o.name)
		if nb == nil {
			continue
		}
		// Collected first: sb must not change while a cursor walks a bucket inside it.
		var kvs [][2][]byte
		if err := nb.ForEach(func(k, v []byte) error {
			if v == nil {
				return fmt.Errorf("unexpected bucket %x in %s", k, o.name)
			}
			kvs = append(kvs, [2][]byte{bytes.Clone(k), bytes.Clone(v)})
			moved += len(k) + len(v)
			return nil
		}); err != nil {
			return 0, err
		}
		if err := sb.DeleteBucket(o.name); err != nil {
			return 0, err
		}
		p := part{sb, o.p}
		for _, kv := range kvs {
			if err := p.Put(kv[0], kv[1]); err != nil {
				return 0, err
			}
		}
	}
	return moved, nil
}
