package storecheck

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"

	"github.com/minio/highwayhash"
)

// The file store's block format (nats-server's filestore.go, "Formats"):
// a block N.blk of stream S is a run of records, each
//
//	total_len(4) seq(8) ts(8) subj_len(2) subj [hdr_len(4) hdr] msg hash(8)
//
// little-endian, the high bit of total_len set when the record has headers,
// the high bits of seq marking an erased record or a delete tombstone, and
// hash the 64-bit HighwayHash, keyed with sha256("S-N"), of seq, ts, the
// subject, the headers and the message. nats-server checks those hashes
// when it rebuilds a block, and cuts the block at the first record that
// fails: everything after a few bytes of garbage is lost with them. scan
// reads past the damage instead, to the next record whose hash holds.

const (
	recHdrSize = 22
	hashSize   = 8
	hdrBit     = 1 << 31
	erasedBit  = 1 << 63
	tombBit    = 1 << 62
	// maxRecord is the largest record nats-server reads (its rlBadThresh).
	maxRecord = 32 << 20
	// maxSubject bounds the subjects a resynchronising scan accepts: the
	// store's are short ("scav.job.<id>.step", "$KV.scav_jobs.<id>").
	maxSubject = 512
)

// record is one record of a block that checks out.
type record struct {
	off, size int
	seq       uint64 // without the erased and tombstone bits
	tomb      bool   // a delete tombstone: seq is the deleted message's
	ts        int64
	subject   string
	header    []byte // the message's headers (nil: none)
	body      []byte // the message, without headers
}

// region is a damaged stretch of a block: bytes that are no record whose
// hash holds. Before and after are the sequences of the good records
// around it (0: none in this block).
type region struct {
	off, size     int
	before, after uint64
}

// blockScan is what scan found in one block.
type blockScan struct {
	records []record
	damaged []region
}

// blockHash is the record hash of block index of stream.
func blockHash(stream string, index uint32) hash.Hash64 {
	key := sha256.Sum256(fmt.Appendf(nil, "%s-%d", stream, index))
	h, _ := highwayhash.New64(key[:]) // a 32-byte key never fails
	return h
}

// scan reads buf, block index of stream, record by record; after damage it
// looks for the next offset where a record's hash holds whose sequence
// follows the last good one (after, when this block has none yet).
func scan(stream string, index uint32, buf []byte, after uint64) blockScan {
	h := blockHash(stream, index)
	var out blockScan
	last := after
	for off := 0; off < len(buf); {
		if r, ok := parseRecord(h, buf, off, 0); ok {
			out.records = append(out.records, r)
			if !r.tomb {
				last = max(last, r.seq)
			}
			off += r.size
			continue
		}
		next := off + 1
		var found *record
		for ; next+recHdrSize <= len(buf); next++ {
			if r, ok := parseRecord(h, buf, next, last); ok {
				found = &r
				break
			}
		}
		if found == nil {
			next = len(buf)
		}
		reg := region{off: off, size: next - off, before: last}
		if found != nil {
			reg.after = found.seq
		}
		out.damaged = append(out.damaged, reg)
		off = next
	}
	return out
}

// parseRecord reads the record at off when it is one whose hash holds. A
// scan that is resynchronising after damage (minSeq > 0, or any non-zero
// offset it tries) asks more of it first, cheaply: a sequence past minSeq and
// a short printable subject, so that garbage is rarely hashed.
func parseRecord(h hash.Hash64, buf []byte, off int, minSeq uint64) (record, bool) {
	le := binary.LittleEndian
	if off+recHdrSize > len(buf) {
		return record{}, false
	}
	hdr := buf[off : off+recHdrSize]
	rl := le.Uint32(hdr[0:])
	hasHeaders := rl&hdrBit != 0
	rl &^= hdrBit
	slen := int(le.Uint16(hdr[20:]))
	shlen := slen
	if hasHeaders {
		shlen += 4
	}
	dlen := int(rl) - recHdrSize
	if dlen < 0 || shlen > dlen-hashSize || rl > maxRecord || off+int(rl) > len(buf) {
		return record{}, false
	}
	rawSeq := le.Uint64(hdr[4:])
	seq := rawSeq &^ (erasedBit | tombBit)
	data := buf[off+recHdrSize : off+int(rl)]
	subj := data[:slen]
	if minSeq > 0 && seq <= minSeq && rawSeq&tombBit == 0 || slen > maxSubject || !printable(subj) {
		return record{}, false
	}
	h.Reset()
	h.Write(hdr[4:20])
	h.Write(subj)
	body := data[slen : dlen-hashSize]
	var header []byte
	if hasHeaders {
		hl := int(le.Uint32(data[slen:]))
		if hl > len(body)-4 {
			return record{}, false
		}
		body = data[slen+4 : dlen-hashSize]
		h.Write(body)
		header, body = body[:hl], body[hl:]
	} else {
		h.Write(body)
	}
	var sum [hashSize]byte
	if !bytes.Equal(h.Sum(sum[:0]), data[dlen-hashSize:]) {
		return record{}, false
	}
	return record{off: off, size: int(rl), seq: seq, tomb: rawSeq&tombBit != 0, ts: int64(le.Uint64(hdr[12:])), subject: string(subj), header: header, body: body}, true
}

// printable: every byte of s is visible ASCII (a subject has no spaces).
func printable(s []byte) bool {
	for _, c := range s {
		if c <= ' ' || c >= 0x7f {
			return false
		}
	}
	return true
}

// salvage is buf without its damaged regions: the good records, in order.
func salvage(buf []byte, s blockScan) []byte {
	out := make([]byte, 0, len(buf))
	for _, r := range s.records {
		out = append(out, buf[r.off:r.off+r.size]...)
	}
	return out
}
