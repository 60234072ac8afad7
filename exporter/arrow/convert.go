package arrow

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// ConvertFile rewrites the trace file src into dst in format f (Arrow file,
// Arrow stream or Parquet, whatever src is), with src's metadata: the same
// records, and the derived columns of this build. An unfinished src (a
// killed writer's) converts up to its last complete batch. dst is written
// through a temporary file and a rename, so a failed conversion leaves
// none. It returns what was read from src.
func ConvertFile(src, dst string, f Format) (FileInfo, error) {
	if f > FormatParquet {
		return FileInfo{}, fmt.Errorf("arrow: unknown format %d", f)
	}
	if a, b := filepath.Clean(src), filepath.Clean(dst); a == b {
		return FileInfo{}, fmt.Errorf("arrow: converting %s onto itself", src)
	}
	r, err := OpenFiles(src)
	if err != nil {
		return FileInfo{}, err
	}
	defer r.Close()
	meta := r.File().Meta
	if meta.SchemaVersion == 0 {
		return r.File(), fmt.Errorf("arrow: %s: the file ends before its schema (it holds no records)", src)
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), filepath.Base(dst)+".convert-*")
	if err != nil {
		return r.File(), fmt.Errorf("arrow: %w", err)
	}
	defer os.Remove(tmp.Name()) // after the rename, a no-op
	seg := &segment{path: dst, f: tmp, schema: schemaFor(meta), wallDelta: meta.WallUnixNs - meta.WallTsNs}
	if err := seg.start(config{format: f}); err != nil {
		tmp.Close()
		return r.File(), fmt.Errorf("arrow: %s: %w", dst, err)
	}
	b := newColBatch(maxChunk)
	for {
		recs, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			tmp.Close()
			return r.File(), err
		}
		// A batch of src stays a batch of dst (Next returns at most
		// maxChunk records).
		b.n = 0
		b.append(recs)
		if err := seg.write(b); err != nil {
			tmp.Close()
			return r.File(), fmt.Errorf("arrow: writing %s: %w", dst, err)
		}
	}
	info := r.File()
	err = seg.w.Close()
	if err == nil {
		err = seg.commit()
	}
	if err == nil {
		err = tmp.Close()
	} else {
		tmp.Close()
	}
	if err == nil {
		err = os.Rename(tmp.Name(), dst)
	}
	if err != nil {
		return info, fmt.Errorf("arrow: writing %s: %w", dst, err)
	}
	return info, nil
}

// ConvertedName is the name ConvertFile's output takes in format f: the
// source's base name with f's extension.
func ConvertedName(src string, f Format) string {
	base := filepath.Base(src)
	for _, g := range []Format{FormatStream, FormatFile, FormatParquet} { // .arrows before .arrow
		if strings.HasSuffix(base, g.Ext()) {
			base = strings.TrimSuffix(base, g.Ext())
			break
		}
	}
	return base + f.Ext()
}
