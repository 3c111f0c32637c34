package norn

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// Overlap says what a schedule does when a tick comes while the task of its
// previous tick has not finished.
type Overlap string

// Overlap policies.
const (
	// OverlapAllow (default) submits the new task anyway.
	OverlapAllow Overlap = "allow"
	// OverlapSkip submits nothing for the tick; the tick counts as skipped.
	OverlapSkip Overlap = "skip"
)

// CatchUp says what a schedule does with ticks it missed (the server was
// down, the schedule was paused, the firer was late by more than
// ScheduleMisfireGrace).
type CatchUp string

// Catch-up policies.
const (
	// CatchUpOne (default) fires once, for the latest missed tick.
	CatchUpOne CatchUp = "one"
	// CatchUpAll fires every missed tick, oldest first, at most
	// MaxCatchUpTicks of them (the latest ones).
	CatchUpAll CatchUp = "all"
	// CatchUpNone fires none of the missed ticks.
	CatchUpNone CatchUp = "none"
)

// Schedule limits and constants.
const (
	// MaxScheduleNameLength keeps derived task ids within MaxIDLength.
	MaxScheduleNameLength = 100
	// MaxCatchUpTicks bounds the tasks one catch-up with CatchUpAll submits.
	MaxCatchUpTicks = 100
	// ScheduleMisfireGrace is how late a tick may be fired and still count
	// as on time rather than missed.
	ScheduleMisfireGrace = time.Minute
	// ScheduleLabel is the label every task a schedule submits carries; its
	// value is the schedule's name.
	ScheduleLabel = "norn.schedule"
)

// Schedule is a stored object that submits a task on every tick of its cron
// expression. The first block is written by the user; the second is kept by
// the store.
type Schedule struct {
	Name     string            `json:"name"`
	Queue    string            `json:"queue"`
	Spec     json.RawMessage   `json:"spec,omitempty"`
	Cron     string            `json:"cron"`
	Timezone string            `json:"timezone,omitempty"` // IANA name; "" = UTC
	Priority uint32            `json:"priority,omitempty"`
	Labels   map[string]string `json:"labels,omitempty"`
	// Timeout, Retry, MaxAttempts and MaxRuntime are copied to every task;
	// zero/nil means the queue's default, as on a submit.
	Timeout     Duration     `json:"timeout,omitzero"`
	Retry       *RetryPolicy `json:"retry,omitempty"`
	MaxAttempts *int         `json:"max_attempts,omitempty"`
	MaxRuntime  Duration     `json:"max_runtime,omitzero"`
	Overlap     Overlap      `json:"overlap,omitempty"`  // "" = allow
	CatchUp     CatchUp      `json:"catch_up,omitempty"` // "" = one
	Paused      bool         `json:"paused"`

	// NextFire is the next tick to fire. A paused schedule keeps it and
	// does not fire; on resume the ticks it passed are missed ticks.
	NextFire time.Time `json:"next_fire,omitzero"`
	LastFire time.Time `json:"last_fire,omitzero"` // tick of the last task submitted
	LastTask string    `json:"last_task,omitempty"`
	Created  time.Time `json:"created"`
	Updated  time.Time `json:"updated"`
}

// ValidateScheduleName checks a schedule name: like a queue name, at most
// MaxScheduleNameLength characters.
func ValidateScheduleName(field, name string) error {
	if name == "" {
		return Invalid(field, "schedule name is required")
	}
	if len(name) > MaxScheduleNameLength || !ValidQueueName(name) {
		return Invalid(field, "schedule name %q must be 1..%d characters of [A-Za-z0-9._:-]", truncate(name, 40), MaxScheduleNameLength)
	}
	return nil
}

// Validate checks the user-written fields and returns the parsed cron
// expression. Nothing is stored when it fails.
func (s *Schedule) Validate() (*Cron, error) {
	if err := ValidateScheduleName("name", s.Name); err != nil {
		return nil, err
	}
	c, err := ParseCron("cron", s.Cron, s.Timezone)
	if err != nil {
		return nil, err
	}
	switch s.Overlap {
	case "", OverlapAllow, OverlapSkip:
	default:
		return nil, Invalid("overlap", "must be %q or %q, not %q", OverlapAllow, OverlapSkip, truncate(string(s.Overlap), 40))
	}
	switch s.CatchUp {
	case "", CatchUpOne, CatchUpAll, CatchUpNone:
	default:
		return nil, Invalid("catch_up", "must be %q, %q or %q, not %q", CatchUpOne, CatchUpAll, CatchUpNone, truncate(string(s.CatchUp), 40))
	}
	if _, ok := s.Labels[ScheduleLabel]; ok {
		return nil, Invalid("labels."+ScheduleLabel, "is set by the schedule itself")
	}
	if s.MaxRuntime < 0 {
		return nil, Invalid("max_runtime", "must not be negative")
	}
	// The task template must be a valid submission on its own.
	n := s.taskTemplate()
	if err := n.Validate(); err != nil {
		return nil, err
	}
	if err := ValidateLabels("labels", n.Labels); err != nil {
		return nil, err
	}
	return c, nil
}

// Normalize fills the defaults of the policy fields, so a stored schedule
// always says what it does.
func (s *Schedule) Normalize() {
	if s.Overlap == "" {
		s.Overlap = OverlapAllow
	}
	if s.CatchUp == "" {
		s.CatchUp = CatchUpOne
	}
}

func (s *Schedule) taskTemplate() NewTask {
	labels := make(map[string]string, len(s.Labels)+1)
	for k, v := range s.Labels {
		labels[k] = v
	}
	labels[ScheduleLabel] = s.Name
	return NewTask{
		Queue:       s.Queue,
		Spec:        s.Spec,
		Priority:    s.Priority,
		Labels:      labels,
		MaxAttempts: s.MaxAttempts,
		Retry:       s.Retry,
		Timeout:     s.Timeout,
		MaxRuntime:  s.MaxRuntime,
	}
}

// ScheduleTaskID is the id of the task a schedule submits for tick: derived
// from the name and the tick, so a second firing of the same tick (another
// node, a restart between submit and the update of next_fire) is an
// idempotent duplicate instead of a second task.
func ScheduleTaskID(name string, tick time.Time) string {
	return ScheduleIDPrefix + name + ":" + tick.UTC().Format("20060102T150405Z")
}

// TaskFor returns the submission for tick. Manual triggers pass the zero
// time and get a store-generated id.
func (s *Schedule) TaskFor(tick time.Time) NewTask {
	n := s.taskTemplate()
	if !tick.IsZero() {
		n.ID = ScheduleTaskID(s.Name, tick)
	}
	return n
}

// FirePlan is what a store does for one schedule at one instant.
type FirePlan struct {
	// Ticks to submit a task for, oldest first.
	Ticks []time.Time
	// Skipped counts due ticks not fired (catch-up policy, overlap, the
	// MaxCatchUpTicks bound).
	Skipped int
	// Next is the schedule's new NextFire.
	Next time.Time
}

// Plan decides what s fires at now. previousRunning says whether the task of
// the last fired tick exists and is not terminal (only read for OverlapSkip).
// A plan with no ticks and Next equal to s.NextFire changes nothing.
func (s *Schedule) Plan(c *Cron, now time.Time, previousRunning bool) FirePlan {
	p := FirePlan{Next: s.NextFire}
	if s.Paused || s.NextFire.IsZero() || s.NextFire.After(now) {
		return p
	}
	// Enumerate the due ticks, keeping only the latest MaxCatchUpTicks: a
	// long outage of a per-second schedule must not allocate per tick.
	var due []time.Time
	n := 0
	last := s.NextFire
	for t := s.NextFire; !t.IsZero() && !t.After(now); t = c.Next(t) {
		n++
		last = t
		if len(due) == MaxCatchUpTicks {
			copy(due, due[1:])
			due = due[:MaxCatchUpTicks-1]
		}
		due = append(due, t)
		if n == maxTicksCounted {
			// Days of per-second ticks: stop walking, jump to the last one.
			last = c.prev(now)
			due = []time.Time{last}
			break
		}
	}
	p.Next = c.Next(maxTime(now, last))
	switch {
	case s.Overlap == OverlapSkip && previousRunning:
		p.Skipped = n
		return p
	case s.CatchUp == CatchUpAll:
		p.Ticks = due
	case s.CatchUp == CatchUpNone:
		if now.Sub(last) <= ScheduleMisfireGrace {
			p.Ticks = []time.Time{last}
		}
	default: // CatchUpOne
		p.Ticks = []time.Time{last}
	}
	if s.Overlap == OverlapSkip && len(p.Ticks) > 1 {
		// With skip, one task at a time: the latest tick stands for the rest.
		p.Ticks = p.Ticks[len(p.Ticks)-1:]
	}
	p.Skipped = n - len(p.Ticks)
	return p
}

// maxTicksCounted bounds the walk over missed ticks in Plan.
const maxTicksCounted = 100_000

// prev returns the latest tick at or before now (the zero time if none in
// the last ten years).
func (c *Cron) prev(now time.Time) time.Time {
	for d := time.Second; d < 10*365*24*time.Hour; d *= 2 {
		t := c.Next(now.Add(-d))
		if t.IsZero() || t.After(now) {
			continue
		}
		for {
			n := c.Next(t)
			if n.IsZero() || n.After(now) {
				return t
			}
			t = n
		}
	}
	return time.Time{}
}

// FirstFire is the NextFire of a schedule created or replaced at now.
func FirstFire(c *Cron, now time.Time) time.Time { return c.Next(now) }

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// ScheduleAPI stores schedules and fires them. Firing is a monitor duty of
// the store (and part of Sweep): at a schedule's NextFire it submits the
// tasks Plan decides and advances NextFire in the same atomic write, so each
// tick yields exactly one task however many nodes, restarts and crashes.
type ScheduleAPI interface {
	// PutSchedule creates or replaces a schedule (idempotent). See
	// PrepareSchedule for what is kept from an existing one.
	PutSchedule(ctx context.Context, s Schedule) (*Schedule, error)
	// GetSchedule returns one schedule, or ErrNotFound.
	GetSchedule(ctx context.Context, name string) (*Schedule, error)
	// ListSchedules returns every schedule, by name.
	ListSchedules(ctx context.Context) ([]*Schedule, error)
	// UpdateSchedule changes the fields u sets (ErrNotFound if absent).
	UpdateSchedule(ctx context.Context, name string, u ScheduleUpdate) (*Schedule, error)
	// DeleteSchedule removes a schedule; the tasks it submitted stay.
	DeleteSchedule(ctx context.Context, name string) error
	// TriggerSchedule submits one task now, outside the cadence: the id is
	// generated, NextFire and LastFire do not move, LastTask does (so
	// overlap=skip waits for it too).
	TriggerSchedule(ctx context.Context, name string) (Submitted, error)
}

// ScheduleUpdate changes a schedule. Nil fields are left alone; the result
// must validate as a whole.
type ScheduleUpdate struct {
	Queue       *string           `json:"queue,omitempty"`
	Spec        json.RawMessage   `json:"spec,omitempty"`
	Cron        *string           `json:"cron,omitempty"`
	Timezone    *string           `json:"timezone,omitempty"`
	Priority    *uint32           `json:"priority,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"` // replaces all labels when non-nil
	Timeout     *Duration         `json:"timeout,omitempty"`
	Retry       *RetryPolicy      `json:"retry,omitempty"`
	MaxAttempts *int              `json:"max_attempts,omitempty"`
	MaxRuntime  *Duration         `json:"max_runtime,omitempty"`
	Overlap     *Overlap          `json:"overlap,omitempty"`
	CatchUp     *CatchUp          `json:"catch_up,omitempty"`
	Paused      *bool             `json:"paused,omitempty"`
}

// ScheduleNotFound is the not_found error for a schedule name.
func ScheduleNotFound(name string) *Error {
	return &Error{Code: CodeNotFound, Message: fmt.Sprintf("schedule %q not found", name)}
}

// PrepareSchedule turns a PutSchedule request into the record to store.
// existing is the stored schedule of that name or nil. Created, LastFire and
// LastTask of an existing schedule are kept; NextFire is kept unless the
// cadence (cron or timezone) changed, so replacing a schedule with the same
// cadence neither skips nor repeats a tick.
func PrepareSchedule(in Schedule, existing *Schedule, now time.Time) (*Schedule, error) {
	c, err := in.Validate()
	if err != nil {
		return nil, err
	}
	out := in
	out.Spec = cloneRaw(in.Spec)
	out.Labels = cloneLabels(in.Labels)
	out.Normalize()
	out.Updated = now
	out.Created, out.NextFire, out.LastFire, out.LastTask = now, FirstFire(c, now), time.Time{}, ""
	if existing != nil {
		out.Created, out.LastFire, out.LastTask = existing.Created, existing.LastFire, existing.LastTask
		if existing.Cron == in.Cron && existing.Timezone == in.Timezone && !existing.NextFire.IsZero() {
			out.NextFire = existing.NextFire
		}
	}
	return &out, nil
}

// ApplyScheduleUpdate returns the record UpdateSchedule stores.
func ApplyScheduleUpdate(existing *Schedule, u ScheduleUpdate, now time.Time) (*Schedule, error) {
	in := *existing
	set := func(dst *string, v *string) {
		if v != nil {
			*dst = *v
		}
	}
	set(&in.Queue, u.Queue)
	set(&in.Cron, u.Cron)
	set(&in.Timezone, u.Timezone)
	if u.Spec != nil {
		in.Spec = u.Spec
	}
	if u.Priority != nil {
		in.Priority = *u.Priority
	}
	if u.Labels != nil {
		in.Labels = u.Labels
	}
	if u.Timeout != nil {
		in.Timeout = *u.Timeout
	}
	if u.Retry != nil {
		in.Retry = u.Retry
	}
	if u.MaxAttempts != nil {
		in.MaxAttempts = u.MaxAttempts
	}
	if u.MaxRuntime != nil {
		in.MaxRuntime = *u.MaxRuntime
	}
	if u.Overlap != nil {
		in.Overlap = *u.Overlap
	}
	if u.CatchUp != nil {
		in.CatchUp = *u.CatchUp
	}
	if u.Paused != nil {
		in.Paused = *u.Paused
	}
	return PrepareSchedule(in, existing, now)
}

// Firing is the outcome of firing one schedule at one instant: the tasks to
// submit and the schedule record to store with them, in one atomic write.
type Firing struct {
	Tasks    []NewTask
	Ticks    []time.Time // Ticks[i] is the tick of Tasks[i]
	Skipped  int
	Schedule *Schedule
}

// FireSchedule decides what firing s at now does. previousRunning says
// whether the task of s.LastTask exists and is not terminal. ok is false
// when nothing is due (store nothing). The returned schedule's NextFire,
// LastFire and LastTask are advanced; Updated is left alone (firing is not
// an edit).
func FireSchedule(s *Schedule, now time.Time, previousRunning bool) (f Firing, ok bool, err error) {
	c, err := ParseCron("cron", s.Cron, s.Timezone)
	if err != nil {
		return Firing{}, false, err
	}
	p := s.Plan(c, now, previousRunning)
	if len(p.Ticks) == 0 && p.Next.Equal(s.NextFire) {
		return Firing{}, false, nil
	}
	next := *s
	next.NextFire = p.Next
	f = Firing{Ticks: p.Ticks, Skipped: p.Skipped, Schedule: &next}
	for _, tick := range p.Ticks {
		n := s.TaskFor(tick)
		f.Tasks = append(f.Tasks, n)
		next.LastFire, next.LastTask = tick, n.ID
	}
	return f, true, nil
}

// Observer receives measurements a store makes in the background (nil
// methods are never called on a nil Observer: stores check). Methods must
// return quickly and must not call the store.
type Observer interface {
	// ScheduleFired reports a task submitted for a schedule's tick and how
	// late after the tick it was submitted.
	ScheduleFired(name string, tick time.Time, lateness time.Duration)
	// BatchFired reports a batch's callbacks submitted (kinds:
	// CallbackComplete, CallbackSuccess) and whether it became done.
	BatchFired(batch string, done bool, kinds []string)
}

func cloneLabels(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
