// Package convstate keeps conversion state in annotations. The v1alpha1
// and v1beta1 APIs cannot represent each other completely (v1alpha1 has no
// claim volume claim templates, v1beta1 no "warmpool: none" policy), so a
// conversion stores what the target version cannot hold in an annotation of
// the converted object and the conversion back restores it. That is what
// makes v1beta1 -> v1alpha1 -> v1beta1 the identity.
package convstate

import (
	"encoding/json"
	"fmt"
)

// Take removes key from annotations and, when it was present, decodes its
// JSON value into into. found reports whether the key was present. The
// annotations map is set to nil when it becomes empty, so an object that had
// none converts back to one that has none.
func Take(annotations *map[string]string, key string, into any) (found bool, err error) {
	raw, ok := (*annotations)[key]
	if !ok {
		return false, nil
	}
	delete(*annotations, key)
	if len(*annotations) == 0 {
		*annotations = nil
	}
	if into == nil {
		return true, nil
	}
	if err := json.Unmarshal([]byte(raw), into); err != nil {
		return true, fmt.Errorf("annotation %s is not valid conversion state: %w", key, err)
	}
	return true, nil
}

// Put stores value as JSON under key, creating the map when needed.
func Put(annotations *map[string]string, key string, value any) error {
	raw, err := json.Marshal(value)
	if err != nil {
		return fmt.Errorf("encoding annotation %s: %w", key, err)
	}
	if *annotations == nil {
		*annotations = map[string]string{}
	}
	(*annotations)[key] = string(raw)
	return nil
}

// Drop removes key, setting the map to nil when it becomes empty.
func Drop(annotations *map[string]string, key string) {
	_, _ = Take(annotations, key, nil)
}
