package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/wire"
)

func schedulePath(name, suffix string) (string, error) {
	if err := norn.ValidateScheduleName("name", name); err != nil {
		return "", err
	}
	return "/v1/schedules/" + url.PathEscape(name) + suffix, nil
}

// schedulePut is a schedule as PUT sends it: without the fields the server
// sets (the document marks them read-only), which the struct{} fields,
// always zero, shadow.
type schedulePut struct {
	norn.Schedule
	NextFire struct{} `json:"next_fire,omitzero"`
	LastFire struct{} `json:"last_fire,omitzero"`
	LastTask struct{} `json:"last_task,omitzero"`
	Created  struct{} `json:"created,omitzero"`
	Updated  struct{} `json:"updated,omitzero"`
}

// PutSchedule creates or replaces a schedule (PUT /v1/schedules/{name}).
func (c *Client) PutSchedule(ctx context.Context, s norn.Schedule) (*norn.Schedule, error) {
	if _, err := s.Validate(); err != nil {
		return nil, err
	}
	p, err := schedulePath(s.Name, "")
	if err != nil {
		return nil, err
	}
	var out wire.ScheduleResponse
	if err := c.do(ctx, request{method: http.MethodPut, path: p, body: schedulePut{Schedule: s}}, &out); err != nil {
		return nil, err
	}
	return out.Schedule, nil
}

// GetSchedule returns one schedule (GET /v1/schedules/{name}).
func (c *Client) GetSchedule(ctx context.Context, name string) (*norn.Schedule, error) {
	p, err := schedulePath(name, "")
	if err != nil {
		return nil, err
	}
	var out wire.ScheduleResponse
	if err := c.do(ctx, request{method: http.MethodGet, path: p}, &out); err != nil {
		return nil, err
	}
	return out.Schedule, nil
}

// ListSchedules returns every schedule the token may see, by name (GET /v1/schedules).
func (c *Client) ListSchedules(ctx context.Context) ([]*norn.Schedule, error) {
	var out wire.SchedulesResponse
	if err := c.do(ctx, request{method: http.MethodGet, path: "/v1/schedules"}, &out); err != nil {
		return nil, err
	}
	if out.Schedules == nil {
		out.Schedules = []*norn.Schedule{}
	}
	return out.Schedules, nil
}

// UpdateSchedule changes the fields u sets (PATCH /v1/schedules/{name}).
func (c *Client) UpdateSchedule(ctx context.Context, name string, u norn.ScheduleUpdate) (*norn.Schedule, error) {
	p, err := schedulePath(name, "")
	if err != nil {
		return nil, err
	}
	var out wire.ScheduleResponse
	// A retry policy u carries is named whole, so it replaces the
	// schedule's as it does in process.
	if err := c.do(ctx, request{method: http.MethodPatch, path: p, body: wire.FromScheduleUpdate(u)}, &out); err != nil {
		return nil, err
	}
	return out.Schedule, nil
}

// DeleteSchedule removes a schedule; its tasks stay (DELETE /v1/schedules/{name}).
func (c *Client) DeleteSchedule(ctx context.Context, name string) error {
	p, err := schedulePath(name, "")
	if err != nil {
		return err
	}
	return c.do(ctx, request{method: http.MethodDelete, path: p}, &wire.Empty{})
}

// TriggerSchedule submits one task of the schedule now (POST /v1/schedules/{name}/trigger).
func (c *Client) TriggerSchedule(ctx context.Context, name string) (norn.Submitted, error) {
	p, err := schedulePath(name, "/trigger")
	if err != nil {
		return norn.Submitted{}, err
	}
	var out wire.TaskResponse
	if err := c.do(ctx, request{method: http.MethodPost, path: p, body: wire.Empty{}}, &out); err != nil {
		return norn.Submitted{}, err
	}
	return norn.Submitted{Task: out.Task, Duplicate: out.Duplicate}, nil
}
