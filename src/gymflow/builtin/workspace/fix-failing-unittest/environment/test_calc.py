import unittest

from calc import divide, percent


class CalcTest(unittest.TestCase):
    def test_divide(self):
        self.assertEqual(divide(7, 2), 3.5)

    def test_percent(self):
        self.assertEqual(percent(1, 3), 33.3)

    def test_zero(self):
        with self.assertRaises(ZeroDivisionError):
            divide(1, 0)


if __name__ == "__main__":
    unittest.main()
