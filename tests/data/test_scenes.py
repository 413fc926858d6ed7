"""Generated vision-and-language scenes: every answer is true of the scene
drawn, and the question alone does not give the answer away."""

import collections

import numpy as np
import pytest

from conftest import raises_naming
from transformer.data.generated import scenes


def true_answer(kind, question, objects):
  """The answer read off the placed objects (colour, shape, slot), by rules
  written independently of the generator."""
  words = question.rstrip('?').split()
  row_col = lambda slot: divmod(slot, scenes.GRID)
  if kind == 'colour':
    (match,) = [c for c, s, _ in objects if s == words[-1]]
    return match
  if kind == 'shape':
    (match,) = [s for c, s, _ in objects if c == words[4]]
    return match
  if kind == 'count':
    return str(sum(scenes.plural(s) == words[2] for _, s, _ in objects))
  if kind == 'exist':
    return 'yes' if (words[3], words[4]) in {(c, s) for c, s, _ in objects} \
        else 'no'
  relation, reference = ' '.join(words[5:-2]), words[-1]
  (anchor,) = [slot for _, s, slot in objects if s == reference]
  (r, c) = row_col(anchor)
  test = {'left of': lambda rr, cc: cc < c, 'right of': lambda rr, cc: cc > c,
          'above': lambda rr, cc: rr < r, 'below': lambda rr, cc: rr > r}
  (match,) = [col for col, _, slot in objects if test[relation](*row_col(slot))]
  return match


def test_answers_are_true_of_the_scene_and_drawn_where_boxed():
  data = scenes.questions(300, seed=0)
  kinds = collections.Counter(data.kinds)
  assert set(kinds) == set(scenes.QUESTION_TYPES)
  for i, (kind, question, answer) in enumerate(
      zip(data.kinds, data.questions, data.answers)):
    objects = data.scenes.objects(i)
    assert answer == true_answer(kind, question, objects), (question, objects)
    assert len({slot for *_, slot in objects}) == len(objects)
  # Each object is drawn inside its box, with its own class.
  s = data.scenes
  size = s.images.shape[1]
  for i in range(50):
    boxed = np.zeros(s.pixel_classes[i].shape, bool)
    for k in np.flatnonzero(s.slots[i] >= 0):
      x0, y0 = np.floor(s.boxes[i, k, :2] * size).astype(int)
      x1, y1 = np.ceil(s.boxes[i, k, 2:] * size).astype(int)
      cls = scenes.object_class(s.colours[i, k], s.shapes[i, k])
      assert (s.pixel_classes[i, y0:y1, x0:x1] == cls).mean() > 0.2
      boxed[y0:y1, x0:x1] = True
    assert not s.pixel_classes[i][~boxed].any()  # nothing outside the boxes


def question_only_accuracy(train, test):
  """Per type, the accuracy of the best a question-only model can learn:
  the most frequent training answer of each exact question."""
  seen = collections.defaultdict(collections.Counter)
  for question, answer in zip(train.questions, train.answers):
    seen[question][answer] += 1
  by_kind = collections.defaultdict(list)
  for kind, question, answer in zip(test.kinds, test.questions, test.answers):
    guess = seen[question].most_common(1)[0][0] if seen[question] else None
    by_kind[kind].append(guess == answer)
  return {kind: np.mean(hits) for kind, hits in by_kind.items()}


def test_a_question_only_model_stays_at_the_prior():
  # Small images: the questions do not depend on them, rendering does.
  train = scenes.questions(4000, seed=0, image_size=12)
  test = scenes.questions(2000, seed=1, image_size=12)
  choices = {'colour': 6, 'shape': 6, 'count': 4, 'relation': 6, 'exist': 2}
  accuracy = question_only_accuracy(train, test)
  for kind, count in choices.items():
    answers = collections.Counter(
        a for k, a in zip(test.kinds, test.answers) if k == kind)
    assert len(answers) == count and max(answers.values()) < 1.5 * 400 / count
    # 400 test questions a type: 4 standard errors above chance at most.
    chance = 1 / count
    assert accuracy[kind] < chance + 4 * np.sqrt(chance * (1 - chance) / 400)
  # The measure sees a leak: answers that follow from the question's words.
  leaky = scenes.Questions(test.scenes, test.questions,
                           [q.split()[-1] for q in test.questions], test.kinds)
  assert min(question_only_accuracy(leaky, leaky).values()) == 1.0


def test_bad_settings_are_refused():
  with raises_naming(ValueError, 'max_objects=2', 'at least 3'):
    scenes.questions(5, seed=0, max_objects=2)
  with raises_naming(ValueError, "question type 'size'", "'relation'"):
    scenes.questions(5, seed=0, kinds=('colour', 'size'))


def named(expression, objects):
  """The objects an expression fits, by rules written independently of the
  generator: 'the COLOUR SHAPE' or 'the SHAPE RELATION the SHAPE'."""
  words = expression.split()
  if len(words) == 3:
    return [i for i, (c, s, _) in enumerate(objects)
            if (c, s) == (words[1], words[2])]
  shape, relation, anchor_shape = words[1], ' '.join(words[2:-2]), words[-1]
  (anchor,) = [slot for _, s, slot in objects if s == anchor_shape]
  (r, c) = divmod(anchor, scenes.GRID)
  test = {'left of': lambda rr, cc: cc < c, 'right of': lambda rr, cc: cc > c,
          'above': lambda rr, cc: rr < r, 'below': lambda rr, cc: rr > r}
  return [i for i, (_, s, slot) in enumerate(objects)
          if s == shape and test[relation](*divmod(slot, scenes.GRID))]


def test_referring_expressions_name_one_object_and_need_every_word():
  data = scenes.referring(300, seed=0)
  for i, expression in enumerate(data.expressions):
    objects = data.scenes.objects(i)
    assert named(expression, objects) == [int(data.targets[i])], expression
    # The confuser: the shape alone names more than one object.
    shape = expression.split()[-1 if data.kinds[i] == 'attribute' else 1]
    assert sum(s == shape for _, s, _ in objects) >= 2
    np.testing.assert_array_equal(
        data.proposals[i, data.target_proposals[i]],
        data.scenes.boxes[i, data.targets[i]])
  assert scenes.box_iou(np.array([0, 0, 2, 2.]), np.array([1, 1, 3, 3.])) \
      == pytest.approx(1 / 7)
  assert scenes.box_iou(np.array([0, 0, 1, 1.]), np.array([2, 2, 3, 3.])) \
      == 0
  # The target's crop shows the target.
  crops = scenes.crop_regions(data.scenes.pixel_classes[..., None],
                              data.proposals, 8)[..., 0]
  for i in range(50):
    target = crops[i, data.target_proposals[i]]
    cls = scenes.object_class(data.scenes.colours[i, data.targets[i]],
                              data.scenes.shapes[i, data.targets[i]])
    assert (target == cls).mean() > 0.2


def test_foils_change_one_colour_shape_or_relation():
  drawn, references = scenes.captioned(200, seed=3)
  rng = np.random.default_rng(0)
  kinds = collections.Counter()
  false = 0
  for i, refs in enumerate(references):
    for caption in refs:
      foiled = scenes.foil(caption, rng)
      a, b = caption.split(), foiled.split()
      assert len(a) == len(b) and a != b
      if len(a) > 3 and a[3:-3] != b[3:-3]:
        # The relation reversed, the objects kept.
        assert b[3:-3] == scenes.OPPOSITE[' '.join(a[3:-3])].split()
        assert a[:3] + a[-3:] == b[:3] + b[-3:]
        kinds['relation'] += 1
      else:
        (at,) = [k for k in range(len(a)) if a[k] != b[k]]
        kind = 'colour' if a[at] in scenes.COLOURS else 'shape'
        assert b[at] in (scenes.COLOURS if kind == 'colour'
                         else scenes.SHAPES)
        kinds[kind] += 1
      false += not scenes.describes(foiled, drawn.objects(i))
  assert min(kinds.values()) > 50, kinds
  # Most foils are false of their image: that is what makes them hard
  # negatives (the rest are labelled aligned by `describes`).
  assert false > 0.8 * sum(kinds.values())
