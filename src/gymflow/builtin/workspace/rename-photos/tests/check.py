import os
assert sorted(os.listdir("/app/photos")) == ["holiday_03.jpg", "img_0001.jpg", "img_0002.jpg", "notes.txt"], os.listdir("/app/photos")
assert open("/app/photos/img_0002.jpg").read() == "b"
