package rpc

import (
	"fmt"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Violations collects request-validation failures; Err turns them into one INVALID_ARGUMENT
// error with google.rpc.BadRequest field violations, so a client sees every problem at once.
type Violations struct {
	list []*errdetails.BadRequest_FieldViolation
}

// Add records that field (a path such as "messages[2].content") is invalid.
func (v *Violations) Add(field, format string, args ...any) {
	v.list = append(v.list, &errdetails.BadRequest_FieldViolation{Field: field, Description: fmt.Sprintf(format, args...)})
}

// Required records field as missing when value is empty.
func (v *Violations) Required(field, value string) {
	if value == "" {
		v.Add(field, "is required")
	}
}

// MaxLen records field as too long when value exceeds max bytes.
func (v *Violations) MaxLen(field, value string, max int) {
	if len(value) > max {
		v.Add(field, "is %d bytes; at most %d are allowed", len(value), max)
	}
}

// Err returns nil when nothing was added, else the INVALID_ARGUMENT error.
func (v *Violations) Err() error {
	if len(v.list) == 0 {
		return nil
	}
	parts := make([]string, len(v.list))
	for i, f := range v.list {
		parts[i] = f.Field + ": " + f.Description
	}
	st := status.New(codes.InvalidArgument, "invalid request: "+strings.Join(parts, "; "))
	if d, err := st.WithDetails(&errdetails.BadRequest{FieldViolations: v.list}); err == nil {
		st = d
	}
	return st.Err()
}

// FieldViolations returns the BadRequest field violations carried by err, if any.
func FieldViolations(err error) []*errdetails.BadRequest_FieldViolation {
	var out []*errdetails.BadRequest_FieldViolation
	for _, d := range status.Convert(err).Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			out = append(out, br.GetFieldViolations()...)
		}
	}
	return out
}
