package boltstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"
)

// A journal makes a commit of a bbolt file durable with one sync instead of bbolt's two (its
// pages, then its meta page). bbolt (patched, third_party/bbolt/JOURNAL.md) hands Log every page
// of a commit, meta page last; Log appends them as one record to path+".journal" and syncs it.
// bbolt writes the pages into the file meanwhile (where the file's last commit has none of its
// own, so they may land early) and the meta page once Log has returned, without a sync. Before a
// file is opened, the journal's records are written into it again (replay), which redoes what a
// crash or power loss kept out of the file. A record counts only whole: its CRC covers it all, so a torn tail is
// ignored, and the commit it held had not been acknowledged.
//
// Records fill one half of the journal, then the other. When records move on to the other
// half, a checkpoint syncs the file in the background: the records of the half they left are
// then in it, and that half may be written over once the records fill the current one. A
// commit waits for a checkpoint only when the records come round to a half whose checkpoint has
// not finished. Replay redoes the records of the current epoch in order: the newer half's, and
// the older half's first when they lead up to them. Redoing a record that is already in the
// file changes nothing, as long as the records redone are the last ones logged, in order.
//
// Layout (little-endian): block 0 holds the journal header (magic, version, epoch, CRC); each
// half holds a run of records, each a header block (magic, version, epoch, sequence number,
// number of writes, length, CRC, then per write its offset, its length and how many of its bytes
// are stored: up to its last byte that is not zero, the rest being zeros; padded to whole blocks)
// followed by the writes' stored bytes, padded to a whole block. A new epoch (at open, at
// close, and before a commit too large for a half, which goes into the file with bbolt's own two
// syncs) leaves every older record out of replay.
//
// The journal is held with an exclusive flock for as long as the DB is open, so that no second
// process replays records into a file that is live.
type journal struct {
	f    *os.File // the journal
	data *os.File // the bbolt file, for syncing it

	// Guarded by bbolt's writer lock (Log runs inside a commit; Close after the DB's own).
	epoch  uint64
	seq    uint64      // the next record's number in the epoch
	half   int64       // the half records go to
	off    int64       // where the next record goes
	ckpt   *checkpoint // the last checkpoint started, nil before the first
	buf    []byte
	stored []int // the bytes of each write that the record being written stores
	err    error // once a write or sync failed, every later Log fails (see Log)

	// checkpoints counts the syncs of the bbolt file (tests read it).
	checkpoints int
}

// checkpoint is a background sync of the bbolt file.
type checkpoint struct {
	done chan struct{}
	err  error // set before done is closed
}

const (
	journalSuffix = ".journal"
	journalBlock  = 4096
	// journalSize is the size of a journal past its header block: two halves of 8 MiB. A half
	// holds about 70 commits of a sequential turn (about 28 pages each); the file is synced in
	// the background each time the records fill one.
	journalSize = 16 << 20
	journalHalf = journalSize / 2
	// journalBuf bounds the buffer through which a record is written; a larger record is
	// written in pieces of this size.
	journalBuf = 256 << 10
	// Bounds for what replay believes of a record header read back from disk.
	journalMaxWrites = 1 << 20
	journalMaxOffset = 1 << 50

	journalVersion = 1
	// Fixed parts of the journal header and of a record header; a record's table follows.
	journalHeaderLen = 20 // magic 4, version 4, epoch 8, CRC 4
	recordHeaderLen  = 48 // magic 4, version 4, epoch 8, seq 8, count 4, pad 4, length 8, CRC 4, pad 4
	recordCRCAt      = 40
)

// errInUse: another process holds the file (its journal, or bbolt's lock on it).
var errInUse = errors.New("the file is in use by another hermes process")

// errJournalForeign: the journal's records do not continue the file (see replayJournal).
var errJournalForeign = errors.New("the journal's records do not continue this file; it was " +
	"replaced or restored while a journal was left to replay: move the journal away to open the file as it is")

var (
	journalMagic = [4]byte{'H', 'B', 'J', 'F'}
	recordMagic  = [4]byte{'H', 'B', 'J', 'R'}
	castagnoli   = crc32.MakeTable(crc32.Castagnoli)
)

func halfStart(h int64) int64 { return journalBlock + h*journalHalf }

// openJournal opens (creating it for a writable file) the journal of the bbolt file at path,
// locks it, and replays it into the file. For a read-only open it returns nil after the replay:
// the journal is released again. timeout bounds the wait for another process's lock.
func openJournal(path string, readOnly bool, timeout time.Duration) (*journal, error) {
	jpath := path + journalSuffix
	flag := os.O_RDWR
	if !readOnly {
		flag |= os.O_CREATE
	}
	f, err := os.OpenFile(jpath, flag, 0o600) // #nosec G304 -- beside the operator's data file
	if errors.Is(err, fs.ErrNotExist) && readOnly {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open journal: %w", err)
	}
	if err := lockJournal(f, timeout); err != nil {
		_ = f.Close()
		return nil, err
	}
	j := &journal{f: f}
	if err := j.open(path, readOnly); err != nil {
		_ = j.close()
		return nil, err
	}
	if readOnly {
		return nil, j.close()
	}
	return j, nil
}

// open replays the journal into the bbolt file and starts a new epoch.
func (j *journal) open(path string, readOnly bool) error {
	st, err := os.Stat(path)
	switch {
	case err == nil && st.Size() > 0:
		if j.data, err = os.OpenFile(path, os.O_RDWR, 0); err != nil { // #nosec G304 -- the operator's data file
			return fmt.Errorf("open for journal: %w", err)
		}
		epoch, n, err := replayJournal(j.f, j.data)
		if err != nil {
			return fmt.Errorf("replay %s: %w", j.f.Name(), err)
		}
		j.epoch = epoch
		if n == 0 && readOnly {
			return nil
		}
		if n > 0 {
			// The file may have grown: a full sync, not a data sync.
			if err := j.data.Sync(); err != nil {
				return fmt.Errorf("replay %s: %w", j.f.Name(), err)
			}
			j.checkpoints++
		}
	case err == nil || errors.Is(err, fs.ErrNotExist):
		// No file, or one bbolt has not begun: records without their file (a deleted one)
		// describe nothing there is. bbolt writes a new file's first pages with its own syncs.
		if readOnly {
			return nil
		}
		if j.data, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600); err != nil { // #nosec G304 -- the operator's data file
			return fmt.Errorf("open for journal: %w", err)
		}
	default:
		return fmt.Errorf("open for journal: %w", err)
	}
	if !readOnly {
		if err := j.writeAhead(); err != nil {
			return err
		}
	}
	return j.newEpoch()
}

// writeAhead writes the journal out to its full size with zeros, once, when it is created. A
// record's sync then finds its blocks already written: syncing blocks written before costs no
// file-system metadata, syncing new or unwritten (fallocated) ones does.
func (j *journal) writeAhead() error {
	st, err := j.f.Stat()
	if err != nil {
		return err
	}
	end := int64(journalBlock + journalSize)
	if st.Size() >= end {
		return nil
	}
	zeros := make([]byte, journalBuf)
	for off := st.Size(); off < end; off += journalBuf {
		if _, err := j.f.WriteAt(zeros[:min(journalBuf, end-off)], off); err != nil {
			return fmt.Errorf("write journal ahead: %w", err)
		}
	}
	if err := j.f.Sync(); err != nil {
		return fmt.Errorf("write journal ahead: %w", err)
	}
	return nil
}

// newEpoch starts a new epoch: records after it go at the start of the first half, and those of
// earlier epochs are not replayed. The caller has made the file hold every earlier record (or
// there were none). It syncs the header, so that it is on disk before a record of the new epoch
// can be acknowledged and before an old record is written over.
func (j *journal) newEpoch() error {
	// An epoch above every earlier one even when the old header was unreadable (replay found
	// no epoch), so that no record left of an old epoch can pass for one of the new.
	j.epoch = max(j.epoch+1, uint64(time.Now().UnixNano()))
	j.seq, j.half, j.off = 0, 0, halfStart(0)
	var h [journalHeaderLen]byte
	copy(h[:4], journalMagic[:])
	binary.LittleEndian.PutUint32(h[4:], journalVersion)
	binary.LittleEndian.PutUint64(h[8:], j.epoch)
	binary.LittleEndian.PutUint32(h[16:], crc32.Checksum(h[:16], castagnoli))
	if _, err := j.f.WriteAt(h[:], 0); err != nil {
		return fmt.Errorf("journal header: %w", err)
	}
	if err := datasync(j.f); err != nil {
		return fmt.Errorf("journal header: %w", err)
	}
	return nil
}

// startCheckpoint syncs the bbolt file in the background. Every record logged so far is in the
// file by now: Log runs after the previous commit has written its pages.
func (j *journal) startCheckpoint() {
	c := &checkpoint{done: make(chan struct{})}
	j.ckpt = c
	j.checkpoints++
	go func() {
		c.err = datasync(j.data)
		close(c.done)
	}()
}

// waitCheckpoint waits for the last checkpoint started, if any.
func (j *journal) waitCheckpoint() error {
	if j.ckpt == nil {
		return nil
	}
	<-j.ckpt.done
	if j.ckpt.err != nil {
		return fmt.Errorf("checkpoint: %w", j.ckpt.err)
	}
	return nil
}

// syncFile syncs the bbolt file now, after any checkpoint under way.
func (j *journal) syncFile() error {
	if err := j.waitCheckpoint(); err != nil {
		return err
	}
	if j.data == nil {
		return errors.New("journal without its file")
	}
	if err := datasync(j.data); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	j.checkpoints++
	return nil
}

// recordHeaderSize is the bytes of a record's header block for n writes.
func recordHeaderSize(n int) int64 {
	return roundBlock(int64(recordHeaderLen + 16*n))
}

func roundBlock(n int64) int64 { return (n + journalBlock - 1) / journalBlock * journalBlock }

// Log appends one commit's writes as a record and syncs it (bolt.Journal).
//
// A failed write or sync leaves the journal unusable until the file is reopened: after a failed
// sync the kernel may already have dropped the pages it could not write, so a later sync that
// succeeds would not mean that the record is on disk (PostgreSQL's "fsyncgate").
func (j *journal) Log(writes []bolt.JournalWrite) error {
	if j.err != nil {
		return j.err
	}
	hsize := recordHeaderSize(len(writes))
	length := hsize
	j.stored = j.stored[:0]
	for _, w := range writes {
		n := storedLen(w.Data)
		j.stored = append(j.stored, n)
		length += int64(n)
		if len(w.Data) > journalHalf {
			length = journalHalf + 1 // larger than a record may be: see log
		}
	}
	length = roundBlock(length)
	if err := j.log(writes, hsize, length); err != nil {
		j.err = fmt.Errorf("journal: %w", err)
		return j.err
	}
	return nil
}

func (j *journal) log(writes []bolt.JournalWrite, hsize, length int64) error {
	if length > journalHalf {
		return j.direct(writes)
	}
	if j.off+length > halfStart(j.half)+journalHalf {
		// The other half's records must be in the file before they are written over.
		if err := j.waitCheckpoint(); err != nil {
			return err
		}
		j.startCheckpoint()
		j.half = 1 - j.half
		j.off = halfStart(j.half)
	}
	if err := j.write(writes, hsize, length); err != nil {
		return err
	}
	if err := datasync(j.f); err != nil {
		return err
	}
	j.off += length
	j.seq++
	return nil
}

// direct commits writes too large for a half of the journal as bbolt does without one: the
// pages, a sync, the meta page (the last write), a sync. The file first takes in every record,
// and a new epoch leaves them out of replay, since redoing them would undo this commit.
func (j *journal) direct(writes []bolt.JournalWrite) error {
	if err := j.syncFile(); err != nil {
		return err
	}
	if err := j.newEpoch(); err != nil {
		return err
	}
	pages, meta := writes[:len(writes)-1], writes[len(writes)-1]
	for _, w := range pages {
		if _, err := j.data.WriteAt(w.Data, w.Offset); err != nil {
			return err
		}
	}
	if err := datasync(j.data); err != nil {
		return err
	}
	if _, err := j.data.WriteAt(meta.Data, meta.Offset); err != nil {
		return err
	}
	return datasync(j.data)
}

// write writes the record at j.off through j.buf.
func (j *journal) write(writes []bolt.JournalWrite, hsize, length int64) error {
	// As large as the records need, up to journalBuf: a file that commits little keeps little.
	if need := max(min(journalBuf, int(length)), int(hsize)); cap(j.buf) < need {
		j.buf = make([]byte, 0, need)
	}
	h := j.buf[:hsize]
	clear(h)
	copy(h[:4], recordMagic[:])
	binary.LittleEndian.PutUint32(h[4:], journalVersion)
	binary.LittleEndian.PutUint64(h[8:], j.epoch)
	binary.LittleEndian.PutUint64(h[16:], j.seq)
	binary.LittleEndian.PutUint32(h[24:], uint32(len(writes)))
	binary.LittleEndian.PutUint64(h[32:], uint64(length))
	for i, w := range writes {
		binary.LittleEndian.PutUint64(h[recordHeaderLen+16*i:], uint64(w.Offset))
		binary.LittleEndian.PutUint32(h[recordHeaderLen+16*i+8:], uint32(len(w.Data)))
		binary.LittleEndian.PutUint32(h[recordHeaderLen+16*i+12:], uint32(j.stored[i]))
	}
	crc := crc32.Update(0, castagnoli, h)
	pad := length - hsize
	for i, w := range writes {
		crc = crc32.Update(crc, castagnoli, w.Data[:j.stored[i]])
		pad -= int64(j.stored[i])
	}
	var zeros [journalBlock]byte
	crc = crc32.Update(crc, castagnoli, zeros[:pad])
	binary.LittleEndian.PutUint32(h[recordCRCAt:], crc)

	// h is the start of the buffer: writing it copies it onto itself.
	w := &chunkWriter{f: j.f, off: j.off, buf: j.buf[:0]}
	w.write(h)
	for i, d := range writes {
		w.write(d.Data[:j.stored[i]])
	}
	w.write(zeros[:pad])
	return w.flush()
}

// storedLen is how much of a write a record stores: up to its last byte that is not zero (a
// page's free space is zeros: bbolt fills a page from its start). Replay writes zeros for the rest.
func storedLen(b []byte) int {
	n := len(b)
	for n >= 8 && binary.LittleEndian.Uint64(b[n-8:]) == 0 {
		n -= 8
	}
	for n > 0 && b[n-1] == 0 {
		n--
	}
	return n
}

// chunkWriter writes a byte stream at off through buf, one WriteAt per full buffer.
type chunkWriter struct {
	f   *os.File
	off int64
	buf []byte
	err error
}

func (w *chunkWriter) write(b []byte) {
	for len(b) > 0 && w.err == nil {
		n := copy(w.buf[len(w.buf):cap(w.buf)], b)
		w.buf, b = w.buf[:len(w.buf)+n], b[n:]
		if len(w.buf) == cap(w.buf) {
			w.err = w.flush()
		}
	}
}

func (w *chunkWriter) flush() error {
	if w.err != nil || len(w.buf) == 0 {
		return w.err
	}
	_, w.err = w.f.WriteAt(w.buf, w.off)
	w.off += int64(len(w.buf))
	w.buf = w.buf[:0]
	return w.err
}

// Close syncs the bbolt file (after bbolt has closed it) and starts a new epoch, so that the
// next open has nothing to replay; then it releases the journal. A journal whose Log failed is
// left as it is, for the next open to replay.
func (j *journal) Close() error {
	if j.f == nil {
		return nil
	}
	var err error
	if j.err == nil && j.data != nil {
		if err = j.syncFile(); err == nil {
			err = j.newEpoch()
		}
	} else {
		_ = j.waitCheckpoint()
	}
	return errors.Join(err, j.close())
}

func (j *journal) close() error {
	var errs []error
	if j.data != nil {
		errs = append(errs, j.data.Close())
		j.data = nil
	}
	if j.f != nil {
		errs = append(errs, j.f.Close()) // releases the flock
		j.f = nil
	}
	return errors.Join(errs...)
}

// replayJournal writes the last records of the journal's epoch into data, in order, and
// returns the epoch (0 when the journal has no valid header) and how many records it wrote. Each
// half holds a run of records of consecutive sequence numbers, up to the first that is not whole
// (torn, of another epoch, out of sequence, or not a record). The newer run is redone, preceded
// by the older one when that leads up to it; an older run that does not was written over or
// synced into the file long before. Everything read is checked before it is believed: sizes
// against the journal's size and fixed bounds, so a damaged journal costs at most a read of
// itself.
//
// Records redone onto another file than theirs would corrupt it: a file restored from a backup
// after a crash, with the crashed process's journal still beside it. So the records redone must
// continue the file: its newest meta page (as bbolt reads it) must be of the commit before their
// first or of one of theirs (the file holds at least what the last checkpoint synced, and no
// commit goes into it before its record is logged); otherwise replay refuses (errJournalForeign).
func replayJournal(jf io.ReaderAt, data readerWriterAt) (epoch uint64, n int, err error) {
	size, err := readerSize(jf)
	if err != nil {
		return 0, 0, err
	}
	var h [journalHeaderLen]byte
	if size < journalBlock {
		return 0, 0, nil
	}
	if _, err := jf.ReadAt(h[:], 0); err != nil {
		return 0, 0, err
	}
	if [4]byte(h[:4]) != journalMagic || binary.LittleEndian.Uint32(h[4:]) != journalVersion ||
		binary.LittleEndian.Uint32(h[16:]) != crc32.Checksum(h[:16], castagnoli) {
		return 0, 0, nil
	}
	epoch = binary.LittleEndian.Uint64(h[8:])
	buf := make([]byte, 64<<10)
	var runs [][]record
	for half := range int64(2) {
		run, err := readRun(jf, halfStart(half), min(size, halfStart(half)+journalHalf), epoch, buf)
		if err != nil {
			return epoch, 0, err
		}
		if len(run) > 0 {
			runs = append(runs, run)
		}
	}
	var redo []record
	switch {
	case len(runs) == 1:
		redo = runs[0]
	case len(runs) == 2:
		older, newer := runs[0], runs[1]
		if older[0].seq > newer[0].seq {
			older, newer = newer, older
		}
		redo = newer
		if older[len(older)-1].seq+1 == newer[0].seq {
			redo = append(older, newer...)
		}
	}
	if len(redo) == 0 {
		return epoch, 0, nil
	}
	first, last := redo[0].txid, redo[len(redo)-1].txid
	if txid, ok := fileTxid(data); !ok || txid+1 < first || txid > last {
		return epoch, 0, fmt.Errorf("%w (records of commits %d to %d; the file's last commit: %d)",
			errJournalForeign, first, last, txid)
	}
	for _, rec := range redo {
		if err := rec.apply(jf, data, buf); err != nil {
			return epoch, 0, err
		}
	}
	return epoch, len(redo), nil
}

type readerWriterAt interface {
	io.ReaderAt
	io.WriterAt
}

// bbolt's meta page, as it lays it out in memory and on disk (native byte order): a page header
// of 16 bytes, then magic, version, page size, flags (4 bytes each), the root bucket (16), the
// free list's page, the high-water page, the transaction id and a checksum (8 each), the checksum
// an FNV-1a of what precedes it from magic on.
const (
	metaAt       = 16
	metaLen      = 64
	metaMagic    = 0xED0CDAED
	metaPageSize = metaAt + 8
	metaTxid     = metaAt + 48
	metaChecksum = metaAt + 56
)

// metaTxidOf returns the transaction id of b, the start of a page, when it is a valid meta page.
func metaTxidOf(b []byte) (uint64, bool) {
	if len(b) < metaAt+metaLen || binary.NativeEndian.Uint32(b[metaAt:]) != metaMagic {
		return 0, false
	}
	h := fnv.New64a()
	_, _ = h.Write(b[metaAt:metaChecksum])
	if h.Sum64() != binary.NativeEndian.Uint64(b[metaChecksum:]) {
		return 0, false
	}
	return binary.NativeEndian.Uint64(b[metaTxid:]), true
}

// fileTxid returns the transaction id of the newest valid meta page of a bbolt file: page 0, or
// page 1 at the page size that page 0 gives (or a common one when page 0 is damaged).
func fileTxid(r io.ReaderAt) (uint64, bool) {
	b := make([]byte, metaAt+metaLen)
	var best uint64
	found := false
	offsets := []int64{0}
	if _, err := r.ReadAt(b, 0); err == nil {
		if ps := int64(binary.NativeEndian.Uint32(b[metaPageSize:])); ps >= 1024 && ps <= 1<<20 {
			offsets = append(offsets, ps)
		}
	}
	offsets = append(offsets, 4096, 16384, 65536)
	for _, off := range offsets {
		if _, err := r.ReadAt(b, off); err != nil {
			continue
		}
		if id := binary.NativeEndian.Uint64(b); (off == 0) != (id == 0) || id > 1 {
			continue // not page 0 or 1 at this size
		}
		if txid, ok := metaTxidOf(b); ok && (!found || txid > best) {
			best, found = txid, true
		}
	}
	return best, found
}

// readRun reads the whole records of the epoch from start, with consecutive sequence numbers,
// that end by end.
func readRun(jf io.ReaderAt, start, end int64, epoch uint64, buf []byte) ([]record, error) {
	var run []record
	for off := start; off+journalBlock <= end; {
		want := int64(-1)
		if len(run) > 0 {
			want = int64(run[len(run)-1].seq) + 1
		}
		rec, ok, err := readRecord(jf, off, end, epoch, want, buf)
		if err != nil || !ok {
			return run, err
		}
		run = append(run, rec)
		off += rec.length
	}
	return run, nil
}

// readerSize is the size of a journal (a file, or a bytes.Reader in fuzzing).
func readerSize(r io.ReaderAt) (int64, error) {
	switch r := r.(type) {
	case *os.File:
		st, err := r.Stat()
		if err != nil {
			return 0, err
		}
		return st.Size(), nil
	case interface{ Size() int64 }:
		return r.Size(), nil
	}
	return 0, errors.New("journal of unknown size")
}

// record is a whole record read back from a journal.
type record struct {
	seq, txid          uint64 // txid: the commit's, from its meta page (the last write)
	off, length, hsize int64
	writes             []span
}

// span is one write of a record read back: n bytes at byte at of the bbolt file, of which the
// record stores the first stored (the rest are zeros).
type span struct{ at, n, stored int64 }

// readRecord reads and checks the record at off: ok is false when there is no whole record of
// the epoch that ends by end there, or when seq is not negative and the record's is not seq.
func readRecord(jf io.ReaderAt, off, end int64, epoch uint64, seq int64, buf []byte) (record, bool, error) {
	var h [recordHeaderLen]byte
	if _, err := jf.ReadAt(h[:], off); err != nil {
		return record{}, false, err
	}
	count := int64(binary.LittleEndian.Uint32(h[24:]))
	length := int64(binary.LittleEndian.Uint64(h[32:]))
	if [4]byte(h[:4]) != recordMagic || binary.LittleEndian.Uint32(h[4:]) != journalVersion ||
		binary.LittleEndian.Uint64(h[8:]) != epoch ||
		(seq >= 0 && binary.LittleEndian.Uint64(h[16:]) != uint64(seq)) ||
		count == 0 || count > journalMaxWrites || length <= 0 || length%journalBlock != 0 ||
		length > end-off {
		return record{}, false, nil
	}
	hsize := recordHeaderSize(int(count))
	if hsize > length {
		return record{}, false, nil
	}
	table := make([]byte, 16*count)
	if _, err := jf.ReadAt(table, off+recordHeaderLen); err != nil {
		return record{}, false, err
	}
	rec := record{seq: binary.LittleEndian.Uint64(h[16:]), off: off, length: length, hsize: hsize}
	total := hsize
	for i := range count {
		o := int64(binary.LittleEndian.Uint64(table[16*i:]))
		l := int64(binary.LittleEndian.Uint32(table[16*i+8:]))
		st := int64(binary.LittleEndian.Uint32(table[16*i+12:]))
		if o < 0 || o > journalMaxOffset || l <= 0 || l > journalHalf || st > l {
			return record{}, false, nil
		}
		total += st
		if total > length {
			return record{}, false, nil
		}
		rec.writes = append(rec.writes, span{o, l, st})
	}
	if roundBlock(total) != length {
		return record{}, false, nil
	}
	// The CRC covers the record with its own field zero.
	want := binary.LittleEndian.Uint32(h[recordCRCAt:])
	crc := uint32(0)
	for pos := int64(0); pos < length; {
		n := min(int64(len(buf)), length-pos)
		if _, err := jf.ReadAt(buf[:n], off+pos); err != nil {
			return record{}, false, err
		}
		if pos <= recordCRCAt && recordCRCAt+4 <= pos+n {
			clear(buf[recordCRCAt-pos : recordCRCAt-pos+4])
		}
		crc = crc32.Update(crc, castagnoli, buf[:n])
		pos += n
	}
	if crc != want {
		return record{}, false, nil
	}
	// The meta page's stored bytes end the record's data; what is not stored is zeros.
	meta := rec.writes[len(rec.writes)-1]
	b := make([]byte, metaAt+metaLen)
	if meta.n < int64(len(b)) {
		return record{}, false, nil
	}
	if _, err := jf.ReadAt(b[:min(meta.stored, int64(len(b)))], off+total-meta.stored); err != nil {
		return record{}, false, err
	}
	txid, ok := metaTxidOf(b)
	if !ok {
		return record{}, false, nil
	}
	rec.txid = txid
	return rec, true, nil
}

// apply writes the record's writes into data.
func (rec record) apply(jf io.ReaderAt, data io.WriterAt, buf []byte) error {
	src := rec.off + rec.hsize
	for _, w := range rec.writes {
		for done := int64(0); done < w.n; {
			n := min(int64(len(buf)), w.n-done)
			if done < w.stored {
				n = min(n, w.stored-done)
				if _, err := jf.ReadAt(buf[:n], src); err != nil {
					return err
				}
				src += n
			} else {
				clear(buf[:n])
			}
			if _, err := data.WriteAt(buf[:n], w.at+done); err != nil {
				return err
			}
			done += n
		}
	}
	return nil
}
