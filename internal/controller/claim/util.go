package claim

import (
	"encoding/json"
	"fmt"
)

func jsonPatch(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encoding patch: %w", err)
	}
	return b, nil
}
