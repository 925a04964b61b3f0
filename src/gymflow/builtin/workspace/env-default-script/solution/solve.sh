#!/bin/bash
set -euo pipefail
cd /app
printf '#!/bin/bash\necho "Hello, ${1:-${GREET_NAME:-world}}!"\n' > greet.sh
chmod +x greet.sh
