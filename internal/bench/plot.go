package bench

import (
	"errors"
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// PlotGrowth draws, from the growth results, controller peak RSS (MiB) and
// claim create->Ready p99 (ms, client-observed and the controller's
// histogram estimate) against the number of Sandboxes, as a PNG of two
// stacked panels with a shared x axis, and writes it to path.
func PlotGrowth(results []*ScaleResult, path string) error {
	if len(results) == 0 {
		return errors.New("no growth results to plot")
	}
	var rss, clientP99, ctrlP99 plotter.XYs
	for _, r := range results {
		x := float64(r.Sandboxes)
		rss = append(rss, plotter.XY{X: x, Y: r.ControllerRSS / (1 << 20)})
		clientP99 = append(clientP99, plotter.XY{X: x, Y: float64(r.Client.P99) / 1e6})
		if r.CtrlObservations > 0 {
			ctrlP99 = append(ctrlP99, plotter.XY{X: x, Y: r.CtrlP99})
		}
	}
	top := plot.New()
	top.Title.Text = "agent-sandbox controller on a kwok stack (claims at 25/s)"
	top.Y.Label.Text = "controller peak RSS (MiB)"
	top.Y.Min = 0
	if err := addLine(top, "peak RSS", rss, color.RGBA{R: 31, G: 119, B: 180, A: 255}); err != nil {
		return err
	}
	bottom := plot.New()
	bottom.X.Label.Text = "Sandboxes in the cluster"
	bottom.Y.Label.Text = "claim create -> Ready p99 (ms)"
	bottom.Y.Min = 0
	if err := addLine(bottom, "client-observed", clientP99, color.RGBA{R: 214, G: 39, B: 40, A: 255}); err != nil {
		return err
	}
	if len(ctrlP99) > 0 {
		if err := addLine(bottom, ControllerHistogram+" (bucket estimate)", ctrlP99, color.RGBA{R: 44, G: 160, B: 44, A: 255}); err != nil {
			return err
		}
	}
	for _, p := range []*plot.Plot{top, bottom} {
		p.X.Min = 0
		p.Legend.Top = true
		p.Legend.Left = true
		p.Add(plotter.NewGrid())
	}
	const w, h = 8 * vg.Inch, 7 * vg.Inch
	img := vgimg.New(w, h)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadX: vg.Millimeter, PadY: 3 * vg.Millimeter,
		PadTop: 2 * vg.Millimeter, PadBottom: 2 * vg.Millimeter, PadLeft: 2 * vg.Millimeter, PadRight: 4 * vg.Millimeter}
	canvases := plot.Align([][]*plot.Plot{{top}, {bottom}}, tiles, dc)
	top.Draw(canvases[0][0])
	bottom.Draw(canvases[1][0])
	return savePNG(img, path)
}

func addLine(p *plot.Plot, name string, xys plotter.XYs, c color.Color) error {
	l, pts, err := plotter.NewLinePoints(xys)
	if err != nil {
		return fmt.Errorf("plotting %s: %w", name, err)
	}
	l.Color, pts.Color = c, c
	l.Width = vg.Points(1.5)
	pts.Shape = draw.CircleGlyph{}
	p.Add(l, pts)
	p.Legend.Add(name, l, pts)
	return nil
}
