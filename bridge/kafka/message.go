package kafka

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nornq/norn"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The Chronos headers every input message must carry.
const (
	HeaderMessageID = "chronosMessageId"
	HeaderDeadline  = "chronosDeadline"
)

// Reasons a message is skipped, the "reason" label of the invalid counter.
const (
	reasonMissingID       = "missing_id"
	reasonMissingDeadline = "missing_deadline"
	reasonBadDeadline     = "bad_deadline"
	reasonTooLarge        = "too_large"
	reasonRejected        = "rejected_by_store"
	reasonIDConflict      = "id_conflict"
)

// invalidError is why an input message was skipped.
type invalidError struct {
	reason string
	msg    string
}

func (e *invalidError) Error() string { return e.msg }

// deadlineLayouts are tried in order. time.Parse accepts fractional seconds
// after the seconds field even when a layout omits them, so these cover
// "with or without fractional seconds", with a zone or (meaning UTC) without.
var deadlineLayouts = []string{time.RFC3339, "2006-01-02T15:04:05"}

// ParseDeadline parses a chronosDeadline header: RFC 3339 with or without
// fractional seconds; a value without a zone is UTC.
func ParseDeadline(s string) (time.Time, error) {
	if len(s) < len("2006-01-02T15:04:05") || len(s) > 64 {
		return time.Time{}, fmt.Errorf("deadline %q is not an RFC 3339 time", truncate(s, 64))
	}
	// RFC 3339 allows lower-case "t" and "z"; Go's parser does not.
	u := strings.Map(func(r rune) rune {
		switch r {
		case 't':
			return 'T'
		case 'z':
			return 'Z'
		}
		return r
	}, s)
	for _, layout := range deadlineLayouts {
		if t, err := time.ParseInLocation(layout, u, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("deadline %q is not an RFC 3339 time", truncate(s, 64))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// message is an input message reduced to what the bridge keeps.
type message struct {
	// ID is the chronosMessageId, verbatim.
	ID       string
	Deadline time.Time
	Key      []byte
	Value    []byte
	// Headers are the non-Chronos headers, in order.
	Headers []kgo.RecordHeader
}

// parseRecord validates the Chronos headers of r. The first occurrence of
// each Chronos header counts; every occurrence is stripped from the relayed
// headers.
func parseRecord(r *kgo.Record) (*message, error) {
	var id, deadline string
	var haveID, haveDeadline bool
	m := &message{Key: r.Key, Value: r.Value}
	for _, h := range r.Headers {
		switch h.Key {
		case HeaderMessageID:
			if !haveID {
				id, haveID = string(h.Value), true
			}
		case HeaderDeadline:
			if !haveDeadline {
				deadline, haveDeadline = string(h.Value), true
			}
		default:
			m.Headers = append(m.Headers, h)
		}
	}
	if !haveID || id == "" {
		return nil, &invalidError{reasonMissingID, "missing or empty " + HeaderMessageID + " header"}
	}
	if !haveDeadline {
		return nil, &invalidError{reasonMissingDeadline, "missing " + HeaderDeadline + " header"}
	}
	t, err := ParseDeadline(deadline)
	if err != nil {
		return nil, &invalidError{reasonBadDeadline, err.Error()}
	}
	m.ID, m.Deadline = id, t
	return m, nil
}

// idSeparator ends the queue name that starts every id of the bridge's tasks.
// Queue names cannot contain it, so "<queue>~" is a prefix that belongs to
// one bridge queue: the bridge's tasks never share an id with an application
// task (whose ids are UUIDs or its own names such as "order-42") nor with
// another bridge deployment using another queue on the same store.
const idSeparator = "~"

// MaxQueueLength is the longest bridge queue name: the queue is part of
// every task id, and "<queue>~~h" + a base64url SHA-256 must fit in
// norn.MaxIDLength.
const MaxQueueLength = norn.MaxIDLength - len(idSeparator) - 2 - 43

// idPrefix is the prefix of every task id the bridge using queue owns.
func idPrefix(queue string) string { return queue + idSeparator }

// TaskID maps a chronosMessageId to the id of the task holding the message
// in the bridge queue queue: "<queue>~" followed by the message id when it
// is a valid norn id that does not start with "~" and fits, otherwise by
// "~b" + base64url(id), or "~h" + base64url(sha256(id)) when even that is
// too long. The original id is kept in the task's spec.
func TaskID(queue, messageID string) string {
	ns := idPrefix(queue)
	if id := ns + messageID; !strings.HasPrefix(messageID, idSeparator) && norn.ValidateID("id", id) == nil {
		return id
	}
	enc := base64.RawURLEncoding.EncodeToString([]byte(messageID))
	if len(ns)+2+len(enc) <= norn.MaxIDLength {
		return ns + idSeparator + "b" + enc
	}
	sum := sha256.Sum256([]byte(messageID))
	return ns + idSeparator + "h" + base64.RawURLEncoding.EncodeToString(sum[:])
}

// spec is the JSON stored in a delayed task. Byte fields are base64 (Go's
// encoding of []byte); null and empty stay distinct, as in Kafka.
type spec struct {
	// V is the format version.
	V        int       `json:"v"`
	ID       string    `json:"message_id"`
	Deadline time.Time `json:"deadline"`
	Key      []byte    `json:"key"`
	Value    []byte    `json:"value"`
	Headers  []header  `json:"headers,omitempty"`
	// Where the message came from, for operators.
	Topic     string `json:"topic,omitempty"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}

// header keeps a header key readable when it is UTF-8 and exact when it is not.
type header struct {
	Key    string `json:"key,omitempty"`
	KeyB64 []byte `json:"key_b64,omitempty"`
	Value  []byte `json:"value"`
}

const specVersion = 1

func encodeSpec(m *message, topic string, partition int32, offset int64) (json.RawMessage, error) {
	s := spec{V: specVersion, ID: m.ID, Deadline: m.Deadline, Key: m.Key, Value: m.Value,
		Topic: topic, Partition: partition, Offset: offset}
	for _, h := range m.Headers {
		hh := header{Value: h.Value}
		if utf8.ValidString(h.Key) {
			hh.Key = h.Key
		} else {
			hh.KeyB64 = []byte(h.Key)
		}
		s.Headers = append(s.Headers, hh)
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	if err := norn.ValidateJSON("spec", b, norn.MaxSpecBytes); err != nil {
		return nil, &invalidError{reasonTooLarge, fmt.Sprintf("message is too large to store (%d bytes encoded, limit %d)", len(b), norn.MaxSpecBytes)}
	}
	return b, nil
}

func decodeSpec(raw json.RawMessage) (*message, error) {
	var s spec
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("task spec is not a bridge message: %w", err)
	}
	if s.V != specVersion {
		return nil, fmt.Errorf("task spec has format version %d, want %d", s.V, specVersion)
	}
	if s.ID == "" {
		return nil, errors.New("task spec has no message_id")
	}
	m := &message{ID: s.ID, Deadline: s.Deadline, Key: s.Key, Value: s.Value}
	for _, h := range s.Headers {
		k := h.Key
		if h.KeyB64 != nil {
			k = string(h.KeyB64)
		}
		m.Headers = append(m.Headers, kgo.RecordHeader{Key: k, Value: h.Value})
	}
	return m, nil
}

// record is the output record of m.
func (m *message) record(topic string) *kgo.Record {
	return &kgo.Record{Topic: topic, Key: m.Key, Value: m.Value, Headers: m.Headers}
}
