lines = [l.split() for l in open("/app/report.txt").read().splitlines() if l.strip()]
assert lines == [["2", "/old"], ["1", "/a"], ["1", "/favicon.ico"]], lines
