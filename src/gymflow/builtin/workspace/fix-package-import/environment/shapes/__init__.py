from geometry import area
