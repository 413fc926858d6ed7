"""Generated scenes of coloured shapes with everything about them known:
the images, each object's colour, shape, grid slot and box, and every
pixel's object class. Vision-and-language tasks (ViLBERT pretraining,
visual question answering, referring expressions) draw their captions,
questions and answers from what the generator placed, so no files and no
annotation are needed.

A scene is an image of `image_size` pixels divided into a 3 x 3 grid of
slots; each object sits in its own slot (a random position and radius
within it), so that "left of" (a smaller slot column) and "above" (a
smaller slot row) are never ambiguous. Colours and shapes are those of the
captioning scenes (`captions.COLOURS`, `captions.SHAPES`).

Questions are generated answer first: for each question type the answer is
drawn uniformly, the question's words independently of it, and the scene is
then built to make that answer true. A model that reads only the question
therefore cannot beat the prior of its question type (tested): it has to
look.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from transformer.data import captions
from transformer.data import images

COLOURS = tuple(captions.COLOURS)
SHAPES = captions.SHAPES
GRID = 3  # slots per side
NUM_CLASSES = 1 + len(COLOURS) * len(SHAPES)  # background, then each pair
# Relation word -> (slot axis, sign): the target's row or column minus the
# reference's has this sign.
RELATIONS = {'left of': (1, -1), 'right of': (1, 1), 'above': (0, -1),
             'below': (0, 1)}
COUNTS = ('0', '1', '2', '3')
QUESTION_TYPES = ('colour', 'shape', 'count', 'relation', 'exist')
ANSWERS = COLOURS + SHAPES + COUNTS + ('yes', 'no')


@dataclasses.dataclass(frozen=True)
class Scenes:
  """N scenes of at most M objects (absent objects: -1 and zero boxes).

  Attributes:
    images: [N, S, S, 3] uint8.
    colours: [N, M] index into COLOURS.
    shapes: [N, M] index into SHAPES.
    slots: [N, M] grid slot, row * GRID + column.
    boxes: [N, M, 4] float32 (x0, y0, x1, y1), fractions of the image side.
    pixel_classes: [N, S, S] uint8, 0 for background, else
      `object_class(colour, shape)` of the object drawn there (later objects
      over earlier ones; slots never overlap).
  """
  images: np.ndarray
  colours: np.ndarray
  shapes: np.ndarray
  slots: np.ndarray
  boxes: np.ndarray
  pixel_classes: np.ndarray

  def objects(self, i: int) -> list[tuple[str, str, int]]:
    """Scene i's objects as (colour, shape, slot)."""
    return [(COLOURS[c], SHAPES[s], int(slot)) for c, s, slot in
            zip(self.colours[i], self.shapes[i], self.slots[i]) if slot >= 0]


def plural(noun: str) -> str:
  return noun + ('es' if noun.endswith('s') else 's')


def object_class(colour: np.ndarray | int, shape: np.ndarray | int):
  """The class id of (colour, shape) pairs in `pixel_classes`."""
  return 1 + np.asarray(colour) * len(SHAPES) + np.asarray(shape)


def render(colours: np.ndarray, shapes: np.ndarray, slots: np.ndarray,
           rng: np.random.Generator, image_size: int = 48) -> Scenes:
  """Draws the objects (colours, shapes, slots [N, M], -1 where absent) on
  grey backgrounds with a little pixel noise."""
  n, m = slots.shape
  s, cell = image_size, image_size / GRID
  present = slots >= 0
  radius = rng.uniform(0.30, 0.45, (n, m)) * cell
  room = cell / 2 - radius  # how far the centre may move within the slot
  row, column = np.divmod(np.maximum(slots, 0), GRID)
  x = (column + 0.5) * cell + rng.uniform(-1, 1, (n, m)) * room
  y = (row + 0.5) * cell + rng.uniform(-1, 1, (n, m)) * room
  background = rng.uniform(0.0, 0.45, (n, 1, 1, 1)) * 255
  scene = np.broadcast_to(background, (n, s, s, 3)).copy()
  classes = np.zeros((n, s, s), np.uint8)
  rows, cols = np.meshgrid(np.arange(s) + 0.5, np.arange(s) + 0.5,
                           indexing='ij')
  palette = np.array([captions.COLOURS[c] for c in COLOURS], np.float64)
  for k in range(m):
    u = (cols[None] - x[:, k, None, None]) / radius[:, k, None, None]
    v = (rows[None] - y[:, k, None, None]) / radius[:, k, None, None]
    mask = np.zeros((n, s, s), bool)
    for index, name in enumerate(SHAPES):
      chosen = present[:, k] & (shapes[:, k] == index)
      mask[chosen] = images._shape_mask(  # pylint: disable=protected-access
          captions._SHAPE_MASKS[name],  # pylint: disable=protected-access
          u[chosen], v[chosen])
    colour = np.maximum(colours[:, k], 0)
    scene = np.where(mask[..., None], palette[colour, None, None], scene)
    classes = np.where(mask, object_class(colour, shapes[:, k])[:, None, None]
                       .astype(np.uint8), classes)
  noise = rng.uniform(0.02, 0.06, (n, 1, 1, 1)) * 255
  scene = scene + noise * rng.standard_normal(scene.shape)
  boxes = np.stack([x - radius, y - radius, x + radius, y + radius], -1) / s
  return Scenes(
      images=np.clip(np.round(scene), 0, 255).astype(np.uint8),
      colours=np.where(present, colours, -1),
      shapes=np.where(present, shapes, -1), slots=slots,
      boxes=np.where(present[..., None], np.clip(boxes, 0, 1), 0).astype(
          np.float32),
      pixel_classes=classes)


def _free_slots(rng: np.random.Generator, taken: list[int], count: int,
                allowed=lambda slot: True) -> list[int]:
  """`count` random slots not in `taken` that `allowed` accepts (fewer if
  there are not enough)."""
  free = [slot for slot in range(GRID * GRID)
          if slot not in taken and allowed(slot)]
  return [int(s) for s in rng.permutation(free)[:count]]


def _in_relation(slot: int, reference: int, relation: str) -> bool:
  axis, sign = RELATIONS[relation]
  return np.sign(divmod(slot, GRID)[axis] - divmod(reference, GRID)[axis]) \
      == sign


def _question(rng: np.random.Generator, kind: str, max_objects: int):
  """One (question, answer, objects) with the answer drawn uniformly first;
  objects are (colour, shape, slot) index triples."""
  pick = lambda options: int(rng.integers(len(options)))
  objects = []

  def add_distractors(count, ok, allowed=lambda slot: True):
    taken = [slot for *_, slot in objects]
    for slot in _free_slots(rng, taken, count, allowed):
      for _ in range(100):  # rejection: a pair the question must not see
        colour, shape = pick(COLOURS), pick(SHAPES)
        if ok(colour, shape):
          objects.append((colour, shape, slot))
          break

  extra = lambda used: int(rng.integers(0, max_objects - used + 1))
  if kind == 'colour':
    shape, answer = pick(SHAPES), pick(COLOURS)
    objects.append((answer, shape, _free_slots(rng, [], 1)[0]))
    add_distractors(extra(1), lambda c, s: s != shape)
    return f'what colour is the {SHAPES[shape]}?', COLOURS[answer], objects
  if kind == 'shape':
    colour, answer = pick(COLOURS), pick(SHAPES)
    objects.append((colour, answer, _free_slots(rng, [], 1)[0]))
    add_distractors(extra(1), lambda c, s: c != colour)
    return (f'what shape is the {COLOURS[colour]} object?', SHAPES[answer],
            objects)
  if kind == 'count':
    shape, answer = pick(SHAPES), pick(COUNTS)
    for slot in _free_slots(rng, [], answer):
      objects.append((pick(COLOURS), shape, slot))
    add_distractors(extra(answer) if answer < max_objects else 0,
                    lambda c, s: s != shape)
    return (f'how many {plural(SHAPES[shape])} are there?', COUNTS[answer],
            objects)
  if kind == 'relation':
    relation = list(RELATIONS)[pick(RELATIONS)]
    shape, answer = pick(SHAPES), pick(COLOURS)
    # A reference slot with room on the relation's side.
    reference = _free_slots(
        rng, [], 1, lambda slot: any(_in_relation(other, slot, relation)
                                     for other in range(GRID * GRID)))[0]
    target = _free_slots(rng, [reference], 1,
                         lambda slot: _in_relation(slot, reference,
                                                   relation))[0]
    objects.append((pick(COLOURS), shape, reference))
    objects.append((answer, (shape + 1 + pick(SHAPES[1:])) % len(SHAPES),
                    target))
    add_distractors(extra(2), lambda c, s: s != shape,
                    lambda slot: not _in_relation(slot, reference, relation))
    return (f'what colour is the shape {relation} the {SHAPES[shape]}?',
            COLOURS[answer], objects)
  if kind == 'exist':
    colour, shape, answer = pick(COLOURS), pick(SHAPES), pick(('yes', 'no'))
    if answer == 0:
      objects.append((colour, shape, _free_slots(rng, [], 1)[0]))
    add_distractors(extra(len(objects)) or (1 - len(objects)),
                    lambda c, s: (c, s) != (colour, shape))
    return (f'is there a {COLOURS[colour]} {SHAPES[shape]}?',
            ('yes', 'no')[answer], objects)
  raise ValueError(f'Unknown question type {kind!r}; choose one of '
                   f'{QUESTION_TYPES}.')


def _relation(slot: int, reference: int) -> str:
  """How `slot` lies from `reference`: by column if they differ, else by
  row."""
  (row, column), (row2, column2) = divmod(slot, GRID), divmod(reference,
                                                              GRID)
  if column != column2:
    return 'left of' if column < column2 else 'right of'
  return 'above' if row < row2 else 'below'


def describe(objects: list[tuple[str, str, int]],
             rng: np.random.Generator) -> str:
  """A caption of a scene: 'a red circle left of a blue square' for two
  objects of it (chosen at random; their relation by `_relation`), 'a red
  circle' when it has one."""
  if len(objects) == 1:
    return f'a {objects[0][0]} {objects[0][1]}'
  first, second = (objects[i] for i in rng.permutation(len(objects))[:2])
  return (f'a {first[0]} {first[1]} {_relation(first[2], second[2])} '
          f'a {second[0]} {second[1]}')


def describes(caption: str, objects: list[tuple[str, str, int]]) -> bool:
  """Whether a `describe` caption is true of a scene's objects."""
  words = caption.split()
  if len(words) == 3:
    return any((c, s) == (words[1], words[2]) for c, s, _ in objects)
  relation = ' '.join(words[3:-3])
  return any(
      (c, s) == (words[1], words[2]) and (c2, s2) == (words[-2], words[-1])
      and slot != slot2 and _relation(slot, slot2) == relation
      for c, s, slot in objects for c2, s2, slot2 in objects)


OPPOSITE = {'left of': 'right of', 'right of': 'left of', 'above': 'below',
            'below': 'above'}


def foil(caption: str, rng: np.random.Generator) -> str:
  """A `describe` caption with one thing changed, a hard negative for the
  alignment task: one object's colour or shape replaced by another, or (two
  objects) the relation reversed. In-batch swaps alone can be told apart by
  colour and never need shapes or positions; foils do. May still be true of
  the image (label it with `describes`)."""
  words = caption.split()
  kinds = ('colour', 'shape') + (('relation',) if len(words) > 3 else ())
  kind = kinds[rng.integers(len(kinds))]
  if kind == 'relation':
    return ' '.join(words[:3] + OPPOSITE[' '.join(words[3:-3])].split()
                    + words[-3:])
  # Which object: its colour word at 1 or -2, its shape word after it.
  at = (1 if len(words) == 3 or rng.integers(2) else len(words) - 2)
  at += kind == 'shape'
  values = COLOURS if kind == 'colour' else SHAPES
  others = [v for v in values if v != words[at]]
  words[at] = others[rng.integers(len(others))]
  return ' '.join(words)


def captioned(num_examples: int, seed: int, *, image_size: int = 48,
              max_objects: int = 4, references: int = 2
              ) -> tuple[Scenes, list[list[str]]]:
  """Scenes of 1 to `max_objects` random objects (distinct (colour, shape)
  pairs, distinct slots), each with `references` captions (`describe`,
  each of a random pair). Deterministic in the arguments."""
  rng = np.random.default_rng([seed, 70_417])
  n, pairs = num_examples, len(COLOURS) * len(SHAPES)
  counts = rng.integers(1, max_objects + 1, n)
  table = np.full((n, max_objects, 3), -1, np.int64)
  for i, count in enumerate(counts):
    pair = rng.permutation(pairs)[:count]
    table[i, :count, 0], table[i, :count, 1] = np.divmod(pair, len(SHAPES))
    table[i, :count, 2] = rng.permutation(GRID * GRID)[:count]
  drawn = render(table[..., 0], table[..., 1], table[..., 2], rng,
                 image_size)
  captions_ = [[describe(drawn.objects(i), rng) for _ in range(references)]
               for i in range(n)]
  return drawn, captions_


def vocabulary_text() -> list[str]:
  """Every word the captions, questions, answers and referring expressions
  of these scenes use (one vocabulary for pretraining and the tasks
  fine-tuned from it)."""
  return [' '.join(COLOURS + SHAPES + tuple(map(plural, SHAPES)) + ANSWERS
                   + tuple(RELATIONS)),
          'a the what colour is shape object how many are there']


@dataclasses.dataclass(frozen=True)
class Questions:
  """Visual questions about generated scenes: scene i answers questions[i]
  with answers[i], of type kinds[i] (a QUESTION_TYPES entry)."""
  scenes: Scenes
  questions: list[str]
  answers: list[str]
  kinds: list[str]


def questions(num_examples: int, seed: int, *, image_size: int = 48,
              max_objects: int = 4,
              kinds: tuple[str, ...] = QUESTION_TYPES) -> Questions:
  """`num_examples` scenes, each with one question, the types in turn.

  Deterministic in (num_examples, seed, image_size, max_objects, kinds);
  use one seed per split.
  """
  if not 3 <= max_objects <= GRID * GRID:
    raise ValueError(f'max_objects={max_objects}: counting up to 3 needs at '
                     f'least 3 objects, and a scene has {GRID * GRID} slots.')
  rng = np.random.default_rng([seed, 51_215])
  texts, answers, kinds_out, placed = [], [], [], []
  for i in range(num_examples):
    kind = kinds[i % len(kinds)]
    question, answer, objects = _question(rng, kind, max_objects)
    texts.append(question)
    answers.append(answer)
    kinds_out.append(kind)
    placed.append(objects)
  table = np.full((num_examples, max_objects, 3), -1, np.int64)
  for i, objects in enumerate(placed):
    order = rng.permutation(len(objects))  # where the answer is, at random
    table[i, :len(objects)] = np.asarray(objects).reshape(-1, 3)[order]
  scenes = render(table[..., 0], table[..., 1], table[..., 2], rng,
                  image_size)
  return Questions(scenes, texts, answers, kinds_out)


EXPRESSION_TYPES = ('attribute', 'relation')


@dataclasses.dataclass(frozen=True)
class Referring:
  """Referring expressions about generated scenes: expression i names
  object `targets[i]` of scene i, whose box is proposal
  `target_proposals[i]` among the scene's `proposals` [N, P, 4] (every
  object's box and random boxes, shuffled), as a detector's proposals."""
  scenes: Scenes
  expressions: list[str]
  kinds: list[str]
  targets: np.ndarray
  proposals: np.ndarray
  target_proposals: np.ndarray


def _expression(rng: np.random.Generator, kind: str, max_objects: int):
  """One (expression, objects) whose first object is the one it names
  uniquely; objects are (colour, shape, slot) index triples."""
  pick = lambda options: int(rng.integers(len(options)))
  other = lambda index, count: (index + 1 + int(rng.integers(count - 1))) \
      % count
  if kind == 'attribute':
    colour, shape = pick(COLOURS), pick(SHAPES)
    slots = [int(x) for x in rng.permutation(GRID * GRID)[:max_objects]]
    # Confusers: the same shape in another colour, the same colour on
    # another shape; then anything but the named pair.
    objects = [(colour, shape, slots[0]),
               (other(colour, len(COLOURS)), shape, slots[1]),
               (colour, other(shape, len(SHAPES)), slots[2])]
    for slot in slots[3:int(rng.integers(3, max_objects + 1))]:
      while True:
        pair = (pick(COLOURS), pick(SHAPES))
        if pair != (colour, shape):
          objects.append((*pair, slot))
          break
    return f'the {COLOURS[colour]} {SHAPES[shape]}', objects
  if kind != 'relation':
    raise ValueError(f'Unknown expression type {kind!r}; choose one of '
                     f'{EXPRESSION_TYPES}.')
  relation = list(RELATIONS)[pick(RELATIONS)]
  shape, anchor_shape = pick(SHAPES), None
  anchor_shape = other(shape, len(SHAPES))
  anchor = _free_slots(rng, [], 1, lambda slot: any(
      _in_relation(o, slot, relation) for o in range(GRID * GRID)) and any(
          not _in_relation(o, slot, relation) and o != slot
          for o in range(GRID * GRID)))[0]
  target = _free_slots(rng, [anchor], 1,
                       lambda slot: _in_relation(slot, anchor, relation))[0]
  confuser = _free_slots(rng, [anchor, target], 1,
                         lambda slot: not _in_relation(slot, anchor,
                                                       relation))[0]
  objects = [(pick(COLOURS), shape, target), (pick(COLOURS), anchor_shape,
                                               anchor),
             (pick(COLOURS), shape, confuser)]
  taken = [anchor, target, confuser]
  for slot in _free_slots(rng, taken, int(rng.integers(0, max_objects - 2))):
    while True:  # anything but the two shapes the expression names
      candidate = (pick(COLOURS), pick(SHAPES))
      if candidate[1] not in (shape, anchor_shape):
        objects.append((*candidate, slot))
        break
  return (f'the {SHAPES[shape]} {relation} the {SHAPES[anchor_shape]}',
          objects)


def crop_regions(images: np.ndarray, boxes: np.ndarray,
                 size: int) -> np.ndarray:
  """Each box's pixels resampled to size x size (nearest pixel centres):
  images [N, S, S, C], boxes [N, P, 4] -> [N, P, size, size, C], as a
  detector's RoI features are pooled to a fixed size."""
  n, s = images.shape[:2]
  steps = (np.arange(size) + 0.5) / size
  xs = boxes[..., 0, None] + steps * (boxes[..., 2, None] - boxes[..., 0,
                                                                   None])
  ys = boxes[..., 1, None] + steps * (boxes[..., 3, None] - boxes[..., 1,
                                                                   None])
  cols = np.clip((xs * s).astype(int), 0, s - 1)  # [N, P, size]
  rows = np.clip((ys * s).astype(int), 0, s - 1)
  scene = np.arange(n)[:, None, None, None]
  return images[scene, rows[..., :, None], cols[..., None, :]]


def referring(num_examples: int, seed: int, *, image_size: int = 48,
              max_objects: int = 4, proposals: int = 10,
              kinds: tuple[str, ...] = EXPRESSION_TYPES) -> Referring:
  """Scenes each with one referring expression ('the blue square', 'the
  circle below the triangle'), a shape or colour confuser in the scene so
  that the whole expression is needed, and `proposals` boxes: every
  object's and random ones (10-40% of the image wide), shuffled.
  Deterministic in the arguments; use one seed per split."""
  if not 3 <= max_objects <= min(GRID * GRID, proposals):
    raise ValueError(f'max_objects={max_objects}: an expression needs 3 '
                     f'objects (the target, its anchor or pair, a '
                     f'confuser), at most the slots and the proposals '
                     f'({proposals}).')
  rng = np.random.default_rng([seed, 31_337])
  texts, kinds_out, placed = [], [], []
  for i in range(num_examples):
    kind = kinds[i % len(kinds)]
    expression, objects = _expression(rng, kind, max_objects)
    texts.append(expression)
    kinds_out.append(kind)
    placed.append(objects)
  table = np.full((num_examples, max_objects, 3), -1, np.int64)
  targets = np.zeros(num_examples, np.int64)
  for i, objects in enumerate(placed):
    order = rng.permutation(len(objects))
    table[i, :len(objects)] = np.asarray(objects)[order]
    targets[i] = int(np.argmin(order))  # where object 0 went
  drawn = render(table[..., 0], table[..., 1], table[..., 2], rng,
                 image_size)
  size = rng.uniform(0.1, 0.4, (num_examples, proposals, 2))
  corner = rng.uniform(0, 1, (num_examples, proposals, 2)) * (1 - size)
  boxes = np.concatenate([corner, corner + size], -1).astype(np.float32)
  present = drawn.slots >= 0
  boxes[:, :max_objects][present] = drawn.boxes[present]
  order = np.argsort(rng.random((num_examples, proposals)), axis=1)
  boxes = np.take_along_axis(boxes, order[..., None], 1)
  target_proposals = np.argmax(order == targets[:, None], axis=1)
  return Referring(drawn, texts, kinds_out, targets, boxes, target_proposals)


def box_iou(a, b, xp=np):
  """Intersection over union of boxes [..., 4] (x0, y0, x1, y1); `xp` the
  array module (jax.numpy inside a jitted loss)."""
  width = xp.maximum(xp.minimum(a[..., 2], b[..., 2])
                     - xp.maximum(a[..., 0], b[..., 0]), 0)
  height = xp.maximum(xp.minimum(a[..., 3], b[..., 3])
                      - xp.maximum(a[..., 1], b[..., 1]), 0)
  area = lambda x: (x[..., 2] - x[..., 0]) * (x[..., 3] - x[..., 1])
  inter = width * height
  return inter / xp.maximum(area(a) + area(b) - inter, 1e-9)
