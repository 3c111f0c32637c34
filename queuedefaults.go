package norn

// ApplyDefaults applies the task defaults u sets to d, leaving the others
// as they are (ApplyFlow does the flow settings). A retry policy of all
// zeros is kept: the queue's tasks are not retried (without a policy they
// would follow DefaultRetry).
func (u *QueueUpdate) ApplyDefaults(d *QueueDefaults) {
	if u.Timeout != nil {
		d.Timeout = *u.Timeout
	}
	if u.Retry != nil {
		r := *u.Retry
		d.Retry = &r
	}
	if u.MaxAttempts != nil {
		d.MaxAttempts = *u.MaxAttempts
	}
	if u.MaxRuntime != nil {
		d.MaxRuntime = *u.MaxRuntime
	}
	if u.ExpireIn != nil {
		d.ExpireIn = *u.ExpireIn
	}
	if u.SequenceOnFailure != nil {
		d.SequenceOnFailure = *u.SequenceOnFailure
		if d.SequenceOnFailure == SequenceHalt {
			d.SequenceOnFailure = ""
		}
	}
	if u.Retention != nil {
		d.Retention = *u.Retention
	}
}
