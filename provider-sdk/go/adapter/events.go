package adapter

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"

	pb "github.com/ccm-rs/ccm-rs/provider-sdk/go/gen/ccmrs/cloudprovider/v1"
	"github.com/ccm-rs/ccm-rs/provider-sdk/go/sdk"
)

// The bounds of the cloud's Events on their way to the contract's warnings.
const (
	// eventGrace is how long a load balancer mutation waits, after the
	// cloud returned, for the Events the cloud emitted during the call:
	// client-go's broadcasters hand an Event from the recorder to the sink
	// through a channel and goroutines, so it reaches the adapter shortly
	// after the cloud returns (well under a millisecond on an idle machine,
	// more on a loaded one). Only once the cloud has taken a client from the
	// builder; small against a cloud mutation, which takes seconds.
	eventGrace = 100 * time.Millisecond
	// eventHold is how long a Service's warning waits for a response about
	// that Service (a later Event is carried by the next one); then it is
	// logged and dropped.
	eventHold = time.Minute
	// nodeEventHold is how long a Node's warning waits for an
	// InstanceMetadata answer about that Node. Those calls do not wait for
	// Events (initialisation and the periodic address refresh, every 5
	// minutes by default, would each take eventGrace longer), so a warning
	// the cloud emits during one rides on the next.
	nodeEventHold = 10 * time.Minute
	// maxPendingEvents and maxPendingBytes bound the warnings waiting; the
	// oldest are logged and dropped first.
	maxPendingEvents = 256
	maxPendingBytes  = 256 << 10
	// maxWarningsPerAnswer bounds the warnings of one response (the rest
	// wait for the next), far within its 1 MiB.
	maxWarningsPerAnswer = 16
	// maxWarningReasonBytes and maxWarningMessageBytes: an Event's reason
	// is at most 128 characters and its note at most 1024 bytes in the API
	// server, and the controller publishes each warning as an Event.
	maxWarningReasonBytes  = 128
	maxWarningMessageBytes = 1024
	// maxEventBodyBytes bounds an Event write the adapter reads.
	maxEventBodyBytes = 1 << 20
	// maxAnsweredEvents bounds the Events remembered for the recorders'
	// PATCHes of a repeated Event; a PATCH of a forgotten one is answered
	// 404, and client-go then creates it again.
	maxAnsweredEvents = 256
)

// cloudEvent is one Event of the cloud, as the adapter keeps it.
type cloudEvent struct {
	kind, namespace, name string
	uid                   types.UID
	typ, reason, message  string
	at                    time.Time
}

func (e cloudEvent) size() int { return len(e.reason) + len(e.message) }

// eventQueue receives the Events the cloud writes through the builder's
// clients, and keeps the Warnings about Services until a load balancer
// response about that Service carries them.
type eventQueue struct {
	mu      sync.Mutex
	pending []cloudEvent
	bytes   int
	// answered are the Events answered, by "<group>/<namespace>/<name>",
	// so a PATCH of a repeated Event gets the patched Event; order is
	// their age.
	answered map[string][]byte
	order    []string
	version  int64
	// writes counts the Event writes answered.
	writes atomic.Int32
	now    func() time.Time
	// log reports an Event no response carries (klog by default).
	log func(e cloudEvent, why string)
}

func newEventQueue() *eventQueue {
	return &eventQueue{answered: map[string][]byte{}, now: time.Now, log: logEvent}
}

func logEvent(e cloudEvent, why string) {
	klog.InfoS("Event of the cloud, not attached to a response: "+why, "type", e.typ, "kind", e.kind,
		"object", klog.KRef(e.namespace, e.name), "uid", e.uid, "reason", e.reason, "message", e.message)
}

// add takes one Event of the cloud: a Warning about a Service or a Node
// waits for a response about it; a Warning about anything else is logged;
// Normal Events are logged at V(2).
func (q *eventQueue) add(e cloudEvent) {
	if e.typ != corev1.EventTypeWarning {
		klog.V(2).InfoS("Event of the cloud", "type", e.typ, "kind", e.kind, "object", klog.KRef(e.namespace, e.name),
			"reason", e.reason, "message", e.message)
		return
	}
	e.reason = cut(e.reason, maxWarningReasonBytes)
	e.message = cut(e.message, maxWarningMessageBytes)
	if e.kind != "Service" && e.kind != "Node" {
		q.log(e, "about a "+e.kind+", not a Service or a Node")
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, p := range q.pending {
		if p.kind == e.kind && p.namespace == e.namespace && p.name == e.name && p.uid == e.uid && p.reason == e.reason && p.message == e.message {
			return // a repeat of one still waiting
		}
	}
	q.pending = append(q.pending, e)
	q.bytes += e.size()
	for len(q.pending) > maxPendingEvents || q.bytes > maxPendingBytes {
		q.log(q.pending[0], "too many waiting")
		q.bytes -= q.pending[0].size()
		q.pending = q.pending[1:]
	}
}

// expire logs and drops the warnings older than their hold (eventHold,
// nodeEventHold for a Node's).
func (q *eventQueue) expire() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.expireLocked()
}

func (q *eventQueue) expireLocked() {
	now := q.now()
	kept := q.pending[:0]
	for _, e := range q.pending {
		hold := eventHold
		if e.kind == "Node" {
			hold = nodeEventHold
		}
		if e.at.Before(now.Add(-hold)) {
			q.log(e, "no response about its "+e.kind+" within "+hold.String())
			q.bytes -= e.size()
			continue
		}
		kept = append(kept, e)
	}
	clear(q.pending[len(kept):])
	q.pending = kept
}

// take removes and returns the waiting warnings about the object of kind
// Service or Node (at most maxWarningsPerAnswer, oldest first; the rest wait
// for the next response). An Event whose object has another uid is about an
// older object of that name and stays until it expires.
func (q *eventQueue) take(kind, namespace, name string, uid types.UID) []*pb.Warning {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.expireLocked()
	var out []*pb.Warning
	kept := q.pending[:0]
	for _, e := range q.pending {
		if len(out) < maxWarningsPerAnswer && e.kind == kind && e.namespace == namespace && e.name == name && (e.uid == "" || uid == "" || e.uid == uid) {
			reason := e.reason
			if !sdk.IsWarningReason(reason) {
				reason = "ProviderWarning" // the contract's reasons are CamelCase words
			}
			message := e.message
			if message == "" {
				message = e.reason // the contract requires a message
			}
			out = append(out, &pb.Warning{Reason: reason, Message: message})
			q.bytes -= e.size()
			continue
		}
		kept = append(kept, e)
	}
	clear(q.pending[len(kept):])
	q.pending = kept
	return out
}

// cut returns s as valid UTF-8 of at most n bytes.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 {
		r, size := utf8.DecodeLastRuneInString(s)
		if r != utf8.RuneError || size > 1 {
			break
		}
		s = s[:len(s)-1]
	}
	return strings.ToValidUTF8(s, "")
}

// eventPath matches the Event collections and Events of core/v1 and
// events.k8s.io/v1, after any path prefix of the server's URL.
var eventPath = regexp.MustCompile(`/(api/v1|apis/events\.k8s\.io/v1)/namespaces/([^/]+)/events(?:/([^/]+))?/?$`)

// wrap is the rest.Config.WrapTransport of every client of the builder:
// Event writes are answered here and never reach the API server, so the
// provider needs no permission for Events, and the controller publishes
// the cloud's warnings under its own identity.
func (q *eventQueue) wrap(next http.RoundTripper) http.RoundTripper {
	return eventTransport{next: next, q: q}
}

type eventTransport struct {
	next http.RoundTripper
	q    *eventQueue
}

func (t eventTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	m := eventPath.FindStringSubmatch(req.URL.Path)
	if m == nil || req.Method == http.MethodGet || req.Method == http.MethodHead || req.Method == http.MethodOptions {
		return t.next.RoundTrip(req)
	}
	group, namespace, name := m[1], m[2], m[3]
	var body []byte
	if req.Body != nil {
		var err error
		body, err = io.ReadAll(io.LimitReader(req.Body, maxEventBodyBytes+1))
		_ = req.Body.Close()
		if err != nil {
			return nil, err
		}
	}
	if len(body) > maxEventBodyBytes {
		return statusResponse(req, http.StatusRequestEntityTooLarge, metav1.StatusReasonRequestEntityTooLarge, "an Event of more than 1 MiB"), nil
	}
	switch {
	case req.Method == http.MethodPost && name == "":
		return t.q.answer(req, group, namespace, "", body, nil, http.StatusCreated), nil
	case (req.Method == http.MethodPut || req.Method == http.MethodPatch) && name != "":
		var original []byte
		if req.Method == http.MethodPatch {
			t.q.mu.Lock()
			original = t.q.answered[group+"/"+namespace+"/"+name]
			t.q.mu.Unlock()
			if original == nil {
				// client-go's recorders then create the Event.
				return statusResponse(req, http.StatusNotFound, metav1.StatusReasonNotFound, fmt.Sprintf("events %q not found", name)), nil
			}
		}
		return t.q.answer(req, group, namespace, name, body, original, http.StatusOK), nil
	case req.Method == http.MethodDelete:
		return statusResponse(req, http.StatusOK, "", ""), nil
	default:
		return statusResponse(req, http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed, req.Method+" of Events is not answered by the adapter"), nil
	}
}

// answer decodes an Event write (a PATCH applied to the Event answered
// before), keeps it, hands it to the queue and answers it as the API
// server would.
func (q *eventQueue) answer(req *http.Request, group, namespace, name string, body, original []byte, code int) *http.Response {
	var obj runtime.Object = &corev1.Event{}
	if group != "api/v1" {
		obj = &eventsv1.Event{}
	}
	if original != nil {
		var err error
		body, err = patch(req.Header.Get("Content-Type"), original, body, obj)
		if err != nil {
			return statusResponse(req, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, err.Error())
		}
	}
	if _, _, err := scheme.Codecs.UniversalDeserializer().Decode(body, nil, obj); err != nil {
		return statusResponse(req, http.StatusBadRequest, metav1.StatusReasonBadRequest, "not an Event: "+err.Error())
	}
	meta, err := metaOf(obj)
	if err != nil {
		return statusResponse(req, http.StatusBadRequest, metav1.StatusReasonBadRequest, err.Error())
	}
	now := q.now()
	q.mu.Lock()
	q.version++
	version := q.version
	q.mu.Unlock()
	meta.SetNamespace(namespace)
	if name != "" {
		meta.SetName(name)
	} else if meta.GetName() == "" {
		meta.SetName(meta.GetGenerateName() + strconv.FormatInt(now.UnixNano(), 36))
	}
	if meta.GetUID() == "" {
		meta.SetUID(uuid.NewUUID())
	}
	if ts := meta.GetCreationTimestamp(); ts.IsZero() {
		meta.SetCreationTimestamp(metav1.NewTime(now))
	}
	meta.SetResourceVersion(strconv.FormatInt(version, 10))
	var e cloudEvent
	switch ev := obj.(type) {
	case *corev1.Event:
		ev.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Event"}
		o := ev.InvolvedObject
		e = cloudEvent{kind: o.Kind, namespace: o.Namespace, name: o.Name, uid: o.UID, typ: ev.Type, reason: ev.Reason, message: ev.Message}
	case *eventsv1.Event:
		ev.TypeMeta = metav1.TypeMeta{APIVersion: "events.k8s.io/v1", Kind: "Event"}
		o := ev.Regarding
		e = cloudEvent{kind: o.Kind, namespace: o.Namespace, name: o.Name, uid: o.UID, typ: ev.Type, reason: ev.Reason, message: ev.Note}
	}
	e.at = now
	out, err := json.Marshal(obj)
	if err != nil {
		return statusResponse(req, http.StatusInternalServerError, metav1.StatusReasonInternalError, err.Error())
	}
	q.remember(group+"/"+namespace+"/"+meta.GetName(), out)
	q.add(e)
	q.writes.Add(1)
	return response(req, code, out)
}

func metaOf(obj runtime.Object) (metav1.Object, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("not an object: %T", obj)
	}
	return m, nil
}

// patch applies a strategic merge patch (what client-go's recorders send;
// a JSON merge patch of an Event's fields reads the same) to original.
func patch(contentType string, original, p []byte, obj runtime.Object) ([]byte, error) {
	if strings.HasPrefix(contentType, string(types.JSONPatchType)) {
		return nil, fmt.Errorf("a JSON patch of an Event is not answered by the adapter")
	}
	return strategicpatch.StrategicMergePatch(original, p, obj)
}

func (q *eventQueue) remember(key string, body []byte) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, ok := q.answered[key]; !ok {
		q.order = append(q.order, key)
	}
	q.answered[key] = body
	for len(q.order) > maxAnsweredEvents {
		delete(q.answered, q.order[0])
		q.order = q.order[1:]
	}
}

func response(req *http.Request, code int, body []byte) *http.Response {
	return &http.Response{
		Status:        strconv.Itoa(code) + " " + http.StatusText(code),
		StatusCode:    code,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        http.Header{"Content-Type": []string{"application/json"}},
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}
}

// statusResponse is the API server's answer of a metav1.Status.
func statusResponse(req *http.Request, code int, reason metav1.StatusReason, message string) *http.Response {
	s := metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}, Status: metav1.StatusSuccess, Code: int32(code)}
	if code >= 300 {
		s.Status, s.Reason, s.Message = metav1.StatusFailure, reason, message
	}
	body, _ := json.Marshal(s)
	return response(req, code, body)
}

// wait gives the cloud's Events of a call that just returned time to
// arrive (see eventGrace); only when the cloud has taken a client.
func (a *Adapter) waitForEvents(ctx context.Context) {
	b, ok := a.builder.(*clientBuilder)
	if !ok || !b.taken.Load() || a.eventGrace <= 0 {
		return
	}
	t := time.NewTimer(a.eventGrace)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// warnings are the waiting warnings about the Service of a response.
func (a *Adapter) warnings(s *pb.Service) []*pb.Warning {
	if _, ok := a.builder.(*clientBuilder); !ok {
		return nil
	}
	return a.events.take("Service", s.GetNamespace(), s.GetName(), types.UID(s.GetUid()))
}

// nodeWarnings are the waiting warnings about the Node of an
// InstanceMetadata answer (no grace wait: see nodeEventHold).
func (a *Adapter) nodeWarnings(n *pb.NodeRef) []*pb.Warning {
	if _, ok := a.builder.(*clientBuilder); !ok {
		return nil
	}
	return a.events.take("Node", "", n.GetName(), types.UID(n.GetUid()))
}

// expireEvents logs the warnings no response carried, until the adapter
// is closed.
func (a *Adapter) expireEvents() {
	t := time.NewTicker(eventHold / 4)
	defer t.Stop()
	for {
		select {
		case <-a.stop:
			return
		case <-t.C:
			a.events.expire()
		}
	}
}
