package sdk

import (
	"context"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
)

func TestARequestReadAfterItsAbsoluteDeadlineIsRefused(t *testing.T) {
	now := time.Now().UnixMilli()
	tests := []struct {
		name    string
		value   []string
		refused bool
	}{
		{name: "absent"},
		{name: "passed 1.5 s ago", value: []string{strconv.FormatInt(now-1500, 10)}, refused: true},
		{name: "a minute ahead", value: []string{strconv.FormatInt(now+60_000, 10)}},
		{name: "not a number: ignored", value: []string{"soon"}},
		{name: "negative: ignored", value: []string{"-5"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			md := metadata.MD{}
			if tt.value != nil {
				md.Set(DeadlineMetadata, tt.value...)
			}
			_, err := callContext(metadata.NewIncomingContext(context.Background(), md))
			if !tt.refused {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("a request past its deadline ran")
			}
			if e := FromError(err); e.Code != codes.DeadlineExceeded {
				t.Fatalf("code %v, want DeadlineExceeded: %v", e.Code, err)
			}
		})
	}
}
