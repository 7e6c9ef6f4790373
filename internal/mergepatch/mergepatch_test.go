package mergepatch

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestMarshal(t *testing.T) {
	yes := true
	cases := []struct {
		name  string
		patch Patch
		want  string
		empty bool
	}{
		{"nothing", Patch{}, `{}`, true},
		{"set and remove", Patch{Meta: Meta{Labels: map[string]*string{"a": Set("1"), "b": nil}}},
			`{"metadata":{"labels":{"a":"1","b":null}}}`, false},
		{"precondition only is empty", Patch{Meta: Meta{ResourceVersion: "7"}}, `{"metadata":{"resourceVersion":"7"}}`, true},
		{"owner references with precondition", Patch{Meta: Meta{
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "K", Name: "n", UID: "u", Controller: &yes}},
			ResourceVersion: "9"}},
			`{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"K","name":"n","uid":"u","controller":true}],"resourceVersion":"9"}}`, false},
		{"managedFields reset alone is empty", Patch{Meta: Meta{ResetManagedFields: true}},
			`{"metadata":{"managedFields":[{}]}}`, true},
		{"fields and annotations", Patch{Meta: Meta{Annotations: map[string]*string{"x": Set("")}},
			Fields: map[string]any{"spec": map[string]any{"replicas": 2}}},
			`{"metadata":{"annotations":{"x":""}},"spec":{"replicas":2}}`, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.patch.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != c.want {
				t.Errorf("Marshal = %s, want %s", got, c.want)
			}
			if c.patch.Empty() != c.empty {
				t.Errorf("Empty = %v, want %v", c.patch.Empty(), c.empty)
			}
		})
	}
}

// A bad field value is an error, not a panic or a partial patch.
func TestMarshalRejectsUnencodable(t *testing.T) {
	if _, err := (Patch{Fields: map[string]any{"spec": make(chan int)}}).Marshal(); err == nil {
		t.Fatal("a channel encoded")
	}
}
