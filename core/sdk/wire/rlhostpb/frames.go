package rlhostpb

// The methods core/sdk/wire/frames needs to run a framed wire of any of these
// call and reply messages: each names its call's id, a call may ask to
// cancel the running call of that id, and a reply may carry an error.

func (c *LentCall) SetId(id uint64) { c.Id = id }

// IsCancel reports whether c cancels the running call of its id.
func (c *LentCall) IsCancel() bool { _, ok := c.GetCall().(*LentCall_Cancel); return ok }

// SetCancel makes c the cancel of the running call of its id.
func (c *LentCall) SetCancel() { c.Call = &LentCall_Cancel{Cancel: &Empty{}} }

func (r *LentReply) SetId(id uint64) { r.Id = id }

// SetError makes r a failed reply.
func (r *LentReply) SetError(e *LentError) { r.Result = &LentReply_Error{Error: e} }

func (c *EnvCall) SetId(id uint64) { c.Id = id }

// IsCancel reports whether c cancels the running call of its id.
func (c *EnvCall) IsCancel() bool { _, ok := c.GetCall().(*EnvCall_Cancel); return ok }

// SetCancel makes c the cancel of the running call of its id.
func (c *EnvCall) SetCancel() { c.Call = &EnvCall_Cancel{Cancel: &Empty{}} }

func (r *EnvReply) SetId(id uint64) { r.Id = id }

// SetError makes r a failed reply.
func (r *EnvReply) SetError(e *LentError) { r.Result = &EnvReply_Error{Error: e} }
