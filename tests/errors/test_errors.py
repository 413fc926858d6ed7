"""`errors.first_line`, the one summary of an error that messages quote."""

from transformer import errors


def test_first_line_is_the_first_non_blank_line_cut_to_its_limit():
  error = ValueError('\n  Out of memory: 17 GiB  \nTraceback ...\n')
  assert errors.first_line(error) == 'Out of memory: 17 GiB'
  assert errors.first_line('x' * 500) == 'x' * 300
  assert errors.first_line('x' * 500, None) == 'x' * 500
  assert errors.first_line(KeyError()) == 'KeyError'
  assert errors.first_line('') == ''
