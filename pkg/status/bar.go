package status

import (
	"fmt"
	"strings"
)

// textBar is a progress bar as text for a table: "[#####...............]  25%"; "" when the total
// is not known yet.
func textBar(done, total int64, cells int) string {
	if total <= 0 {
		return ""
	}
	done = min(max(done, 0), total)
	full := int(done * int64(cells) / total)
	return fmt.Sprintf("[%s%s] %3d%%", strings.Repeat("#", full), strings.Repeat(".", cells-full), done*100/total)
}
