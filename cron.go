package norn

import (
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// cronParser accepts the standard 5-field form, the 6-field form with a
// leading seconds field, and the descriptors (@hourly, @daily, @every 30s...).
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour |
	cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Cron is a parsed cron expression bound to a time zone. Its ticks are
// instants; Next is pure, so every node of a cluster computes the same ticks.
//
// Field expressions are matched against the wall clock of the zone, and the
// wall-clock times are then mapped to instants with two rules for daylight
// saving changes: a wall time that does not exist (the skipped hour) fires
// once, at the instant the clocks jump; a wall time that exists twice (the
// repeated hour) fires once, at its first occurrence. `@every D` is a fixed
// interval of real time and ignores the zone.
type Cron struct {
	expr  string
	loc   *time.Location
	spec  *cron.SpecSchedule // evaluated on wall-clock times written as UTC
	every time.Duration
}

// ParseCron parses expr in the IANA zone tz ("" means UTC). Errors are
// invalid_argument naming field (for the expression) or field's sibling
// "timezone".
func ParseCron(field, expr, tz string) (*Cron, error) {
	loc := time.UTC
	if tz != "" {
		l, err := time.LoadLocation(tz)
		if err != nil || tz == "Local" {
			return nil, Invalid("timezone", "%q is not an IANA time zone name", truncate(tz, 60))
		}
		loc = l
	}
	e := strings.TrimSpace(expr)
	if e == "" {
		return nil, Invalid(field, "cron expression is required")
	}
	if strings.HasPrefix(e, "TZ=") || strings.HasPrefix(e, "CRON_TZ=") {
		return nil, Invalid(field, "give the time zone in the timezone field, not in the expression")
	}
	if rest, ok := strings.CutPrefix(e, "@every "); ok {
		// The library rounds what it cannot do; say so instead.
		d, err := time.ParseDuration(strings.TrimSpace(rest))
		if err == nil && (d < time.Second || d%time.Second != 0) {
			return nil, Invalid(field, "@every needs a whole number of seconds, at least 1s")
		}
	}
	s, err := cronParser.Parse(e)
	if err != nil {
		return nil, Invalid(field, "%q is not a cron expression: %v", truncate(e, 60), err)
	}
	c := &Cron{expr: e, loc: loc}
	switch s := s.(type) {
	case *cron.SpecSchedule:
		spec := *s
		spec.Location = time.UTC
		c.spec = &spec
		// An expression that never matches (e.g. 30 February) would make
		// every Next search the library's five years; refuse it up front.
		if c.spec.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
			return nil, Invalid(field, "%q never fires", truncate(e, 60))
		}
	case cron.ConstantDelaySchedule:
		c.every = s.Delay
	default:
		return nil, Invalid(field, "%q is not a supported cron expression", truncate(e, 60))
	}
	return c, nil
}

// String returns the expression as given (trimmed).
func (c *Cron) String() string { return c.expr }

// Location is the zone the expression is evaluated in.
func (c *Cron) Location() *time.Location { return c.loc }

// Next returns the first tick strictly after after, or the zero time if there
// is none in the next five years.
func (c *Cron) Next(after time.Time) time.Time {
	if c.every > 0 {
		return after.Truncate(time.Second).Add(c.every)
	}
	l := after.In(c.loc)
	wall := time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), l.Nanosecond(), time.UTC)
	// Ticks in a repeated hour map to instants before after; a handful of
	// steps always gets past them, the bound only guards against a bug.
	for i := 0; i < 10000; i++ {
		w := c.spec.Next(wall)
		if w.IsZero() {
			return time.Time{}
		}
		if t := c.instant(w); t.After(after) {
			return t
		}
		wall = w
	}
	return time.Time{}
}

// instant maps a wall-clock time (written as UTC) to the instant it names in
// c.loc: the earlier of two for a repeated time, the moment of the jump for a
// skipped one.
func (c *Cron) instant(w time.Time) time.Time {
	var best time.Time
	for _, probe := range []time.Duration{-26 * time.Hour, 0, 26 * time.Hour} {
		_, off := w.Add(probe).In(c.loc).Zone()
		t := w.Add(-time.Duration(off) * time.Second)
		if _, o := t.In(c.loc).Zone(); o == off && (best.IsZero() || t.Before(best)) {
			best = t
		}
	}
	if !best.IsZero() {
		return best
	}
	// In a gap: read as standard time the wall time lies after the jump, read
	// as the later offset it lies before it; the jump is where the zone that
	// holds the earlier reading ends.
	_, offBefore := w.Add(-26 * time.Hour).In(c.loc).Zone()
	_, offAfter := w.Add(26 * time.Hour).In(c.loc).Zone()
	a := w.Add(-time.Duration(offBefore) * time.Second)
	b := w.Add(-time.Duration(offAfter) * time.Second)
	if b.Before(a) {
		a = b
	}
	_, end := a.In(c.loc).ZoneBounds()
	if end.IsZero() {
		return a
	}
	return end
}
