package server

import (
	"net/http"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/wire"
)

// Schedules are scoped by their queue: a queue-scoped token sees and
// changes only the schedules of its queues, and any other schedule looks
// like one that does not exist.

func pathSchedule(r *http.Request) (string, error) {
	name := r.PathValue("name")
	return name, norn.ValidateScheduleName("name", name)
}

// scopedSchedule reads a schedule the caller may see, or not_found.
func (s *Server) scopedSchedule(r *http.Request, name string) (*norn.Schedule, error) {
	sc, err := s.store.GetSchedule(r.Context(), name)
	if err != nil {
		return nil, err
	}
	if principalFrom(r.Context()).checkQueue(sc.Queue) != nil {
		return nil, norn.ScheduleNotFound(name)
	}
	return sc, nil
}

func (s *Server) handleSchedules(w http.ResponseWriter, r *http.Request) error {
	if err := noParams(r); err != nil {
		return err
	}
	all, err := s.store.ListSchedules(r.Context())
	if err != nil {
		return err
	}
	p := principalFrom(r.Context())
	out := make([]*norn.Schedule, 0, len(all))
	for _, sc := range all {
		if p.checkQueue(sc.Queue) == nil {
			out = append(out, sc)
		}
	}
	writeJSON(w, http.StatusOK, wire.SchedulesResponse{Schedules: out})
	return nil
}

// scheduleRequest is pathRequest for a route on one schedule that the
// caller must be able to see.
func (s *Server) scheduleRequest(r *http.Request, body any, optional bool) (string, error) {
	name, err := pathRequest(r, pathSchedule, body, optional)
	if err != nil {
		return "", err
	}
	_, err = s.scopedSchedule(r, name)
	return name, err
}

func (s *Server) handleSchedule(w http.ResponseWriter, r *http.Request) error {
	name, err := pathRequest(r, pathSchedule, nil, false)
	if err != nil {
		return err
	}
	sc, err := s.scopedSchedule(r, name)
	return reply(w, wire.ScheduleResponse{Schedule: sc}, err)
}

func (s *Server) handlePutSchedule(w http.ResponseWriter, r *http.Request) error {
	var in norn.Schedule
	name, err := pathRequest(r, pathSchedule, &in, false)
	if err != nil {
		return err
	}
	switch {
	case in.Name == "":
		in.Name = name
	case in.Name != name:
		return norn.Invalid("name", "body names schedule %q but the path names %q", in.Name, name)
	}
	if _, err := in.Validate(); err != nil {
		return err
	}
	p := principalFrom(r.Context())
	if err := p.checkQueue(in.Queue); err != nil {
		return err
	}
	if p.scoped() {
		// Replacing a schedule of a queue outside the scope would move it
		// into the caller's reach.
		if old, err := s.store.GetSchedule(r.Context(), name); err == nil && p.checkQueue(old.Queue) != nil {
			return norn.Errorf(norn.CodeConflict, "schedule name %q is not available", name)
		}
	}
	sc, err := s.store.PutSchedule(r.Context(), in)
	return reply(w, wire.ScheduleResponse{Schedule: sc}, err)
}

// handleUpdateSchedule changes the fields the body names; a retry policy
// that names only some members keeps the others (wire.SchedulePatch).
func (s *Server) handleUpdateSchedule(w http.ResponseWriter, r *http.Request) error {
	var p wire.SchedulePatch
	name, err := pathRequest(r, pathSchedule, &p, false)
	if err != nil {
		return err
	}
	if p.Retry != nil {
		unlock := s.patches.lock("schedule:" + name)
		defer unlock()
	}
	cur, err := s.scopedSchedule(r, name)
	if err != nil {
		return err
	}
	u := p.Update(cur)
	if u.Queue != nil {
		if err := principalFrom(r.Context()).checkQueue(*u.Queue); err != nil {
			return err
		}
	}
	sc, err := s.store.UpdateSchedule(r.Context(), name, u)
	return reply(w, wire.ScheduleResponse{Schedule: sc}, err)
}

func (s *Server) handleDeleteSchedule(w http.ResponseWriter, r *http.Request) error {
	name, err := s.scheduleRequest(r, nil, false)
	if err != nil {
		return err
	}
	return reply(w, wire.Empty{}, s.store.DeleteSchedule(r.Context(), name))
}

func (s *Server) handleTriggerSchedule(w http.ResponseWriter, r *http.Request) error {
	name, err := s.scheduleRequest(r, &wire.Empty{}, true)
	if err != nil {
		return err
	}
	sub, err := s.store.TriggerSchedule(r.Context(), name)
	return reply(w, wire.TaskResponse{Task: sub.Task, Duplicate: sub.Duplicate}, err)
}
