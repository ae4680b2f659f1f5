package session

import (
	"bytes"
	"encoding/binary"
	"slices"

	bolt "go.etcd.io/bbolt"
)

// Search postings, layout 3. postings holds a key per user, term, session and block of
// 1<<postingBlockBits seqs; its value lists the block's messages that hold the term:
//
//	postings  uid 0x00 term 0x00 sid 0x00 block (seq>>8, 8 bytes big-endian) → offsets
//
// where offsets are seq&0xff of each such message, a byte each, ascending. Layout 2 kept a key
// per posting (index: uid 0x00 term 0x00 sid 0x00 seq → nil): a term a session's messages repeat
// repeated the user's and session's ids with it, so the index was several times the postings
// (85 bytes a key where the list spends one), and a flush, whose postings land all over the
// tree, dirtied as many leaf pages as the tree had. Blocks bound a list, so that a flush rewrites
// at most 256 bytes of one however long the session.
var (
	bPostings = []byte("postings")
	// bIndex is layout 2's postings, moved into bPostings when the file opens.
	bIndex = []byte("index")
)

const postingBlockBits = 8

// postingKey is the key of the list that holds seq's posting of term; one allocation, since a
// key is built for every term of every message.
func postingKey(uid, term, sid string, seq int64) []byte {
	k := appendPostingPrefix(make([]byte, 0, len(uid)+len(term)+len(sid)+3+8), uid, term)
	k = append(k, sid...)
	k = append(k, 0)
	return binary.BigEndian.AppendUint64(k, uint64(seq)>>postingBlockBits)
}

// postingPrefix is the prefix of the keys of uid's lists of term.
func postingPrefix(uid, term string) []byte {
	return appendPostingPrefix(make([]byte, 0, len(uid)+len(term)+2), uid, term)
}

func appendPostingPrefix(k []byte, uid, term string) []byte {
	k = append(k, uid...)
	k = append(k, 0)
	k = append(k, term...)
	return append(k, 0)
}

// postingOffset is seq's byte in its block's list.
func postingOffset(seq int64) byte { return byte(seq) }

// blockSeq is the seq of offset off in block.
func blockSeq(block uint64, off byte) int64 { return int64(block<<postingBlockBits | uint64(off)) }

// hasPosting reports whether postings holds seq's posting of term.
func hasPosting(postings *bolt.Bucket, uid, term, sid string, seq int64) bool {
	list := postings.Get(postingKey(uid, term, sid, seq))
	_, ok := slices.BinarySearch(list, postingOffset(seq))
	return ok
}

// mergeOffsets returns list with offs (ascending) added, each once. The result is a new slice:
// list may be a value bbolt owns. A list not in order (a damaged file) is merged as it is.
func mergeOffsets(list, offs []byte) []byte {
	out := make([]byte, 0, len(list)+len(offs))
	for len(list) > 0 || len(offs) > 0 {
		var b byte
		switch {
		case len(offs) == 0 || (len(list) > 0 && list[0] <= offs[0]):
			b, list = list[0], list[1:]
		default:
			b, offs = offs[0], offs[1:]
		}
		if len(out) == 0 || out[len(out)-1] != b {
			out = append(out, b)
		}
	}
	return out
}

// migrateIndexKeys bounds the postings of layout 2 that one transaction moves into layout 3.
const migrateIndexKeys = 1 << 16

// migrateIndex moves layout 2's postings into postings' lists, in transactions of up to limit
// keys, then drops index and records layout 3. A crash part way leaves each posting in index or
// in a list (moving is deleting and merging, in one transaction); the next open goes on. Nothing
// else writes the file while it opens.
func migrateIndex(db *bolt.DB, limit int) error {
	for done := false; !done; {
		err := db.Update(func(tx *bolt.Tx) error {
			if old := tx.Bucket(bIndex); old != nil {
				moved, err := movePostings(old, tx.Bucket(bPostings), limit)
				if err != nil || moved == limit {
					return err
				}
				if err := tx.DeleteBucket(bIndex); err != nil {
					return err
				}
			}
			done = true
			return tx.Bucket(bLayout).Put(layoutKey, layoutValue)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// movePostings moves up to limit of index's first keys ("prefix seq", prefix ending in 0x00)
// into postings and returns how many it moved. A key too short to hold a seq is dropped.
func movePostings(index, postings *bolt.Bucket, limit int) (int, error) {
	var keys [][]byte
	c := index.Cursor()
	for k, _ := c.First(); k != nil && len(keys) < limit; k, _ = c.Next() {
		keys = append(keys, bytes.Clone(k))
	}
	// listOf is the list that holds an old key's posting, and its offset in it; nil for a key too
	// short to hold a seq.
	listOf := func(k []byte) (list []byte, off byte) {
		if len(k) < 9 {
			return nil, 0
		}
		seq := binary.BigEndian.Uint64(k[len(k)-8:])
		return binary.BigEndian.AppendUint64(bytes.Clone(k[:len(k)-8]), seq>>postingBlockBits), postingOffset(int64(seq))
	}
	var offs []byte
	for i := 0; i < len(keys); {
		// Keys in order: a list's postings are consecutive.
		list, off := listOf(keys[i])
		i++
		if list == nil {
			continue
		}
		offs = append(offs[:0], off)
		for ; i < len(keys); i++ {
			next, off := listOf(keys[i])
			if !bytes.Equal(next, list) {
				break
			}
			offs = append(offs, off)
		}
		if err := postings.Put(list, mergeOffsets(postings.Get(list), offs)); err != nil {
			return 0, err
		}
	}
	for _, k := range keys {
		if err := index.Delete(k); err != nil {
			return 0, err
		}
	}
	return len(keys), nil
}
