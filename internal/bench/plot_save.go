package bench

import (
	"fmt"
	"os"

	"gonum.org/v1/plot/vg/vgimg"
)

// savePNG writes the canvas as PNG, via a temp file so a failed write never
// leaves a truncated plot behind.
func savePNG(img *vgimg.Canvas, path string) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("writing plot: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		_ = f.Close()
		_ = os.Remove(tmp)
		return fmt.Errorf("writing plot: %w", err)
	}
	if err := f.Close(); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("writing plot: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing plot: %w", err)
	}
	return nil
}
