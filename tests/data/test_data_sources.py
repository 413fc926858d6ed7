"""Data sources: the generated translation task and local files (TFDS:
e2e/test_data_sources_e2e.py)."""

import gzip
import math
import os

import pytest

from conftest import raises_naming
from conftest import REPO
from transformer.data import parallel_text
from transformer.data.generated import offline_mt

MULTI30K = os.path.join(REPO, '..', 'shared', 'data', 'multi30k')

# ---------------------------------------------------------------------------
# offline_mt

EN_NOUNS = {**{n.english: (n, False) for n in offline_mt.NOUNS},
            **{n.english_plural: (n, True) for n in offline_mt.NOUNS}}
EN_ADJECTIVES = {a.english: a for a in offline_mt.ADJECTIVES}
EN_VERBS = {**{v.english: (v, False) for v in offline_mt.VERBS},
            **{v.english_plural: (v, True) for v in offline_mt.VERBS}}
EN_DETERMINERS = {word: d for d in offline_mt.DETERMINERS
                  for word in (d.english, d.english_plural) if word}
EN_DETERMINERS['an'] = EN_DETERMINERS['a']

FEMININE_PLURAL_DETERMINERS = {'las', 'unas', 'estas', 'esas', 'mis', 'tus',
                               'muchas', 'dos', 'tres'}


def parse_english(text):
  """The Sentence behind an English source, via lexicon look-ups only."""
  words = iter(text.split())

  def noun_phrase():
    determiner = EN_DETERMINERS[next(words)]
    adjectives = []
    for word in words:
      if word not in EN_ADJECTIVES:
        noun, plural = EN_NOUNS[word]
        return offline_mt.NounPhrase(determiner, tuple(adjectives), noun,
                                     plural)
      adjectives.append(EN_ADJECTIVES[word])

  subject = noun_phrase()
  verb, verb_plural = EN_VERBS[next(words)]
  assert verb_plural == subject.plural, text
  obj = noun_phrase()
  preposition = next(words, None)
  if preposition is None:
    return offline_mt.Sentence(subject, verb, obj)
  assert preposition in offline_mt.PREPOSITIONS, text
  sentence = offline_mt.Sentence(subject, verb, obj, preposition, noun_phrase())
  assert next(words, None) is None, text
  return sentence


def spanish_features():
  """Maps Spanish determiner and adjective forms to their (gender, plural)s."""
  features = {'del': {('m', False)}}  # de + el
  forms = [(form, gender, plural) for d in offline_mt.DETERMINERS
           for plural, pair in ((False, d.spanish), (True, d.spanish_plural))
           if pair for gender, form in zip('mf', pair)]
  forms += [(a.translate(gender, plural), gender, plural)
            for a in offline_mt.ADJECTIVES
            for gender in 'mf' for plural in (False, True)]
  for form, gender, plural in forms:
    features.setdefault(form, set()).add((gender, plural))
  return features


def test_generate_is_deterministic_per_seed():
  assert offline_mt.generate(50, seed=1) == offline_mt.generate(50, seed=1)
  assert offline_mt.generate(50, seed=1) != offline_mt.generate(50, seed=2)
  pairs = offline_mt.generate(50, seed=1)
  assert all(isinstance(s, str) and isinstance(t, str) for s, t in pairs)


def test_held_out_sentences_are_new_and_distinct():
  data = offline_mt.splits(num_train=3000, num_eval=300, num_test=300, seed=0)
  assert {k: len(v) for k, v in data.items()} == {
      'train': 3000, 'validation': 300, 'test': 300}
  sources = {k: [s for s, _ in v] for k, v in data.items()}
  assert len(set(sources['validation'] + sources['test'])) == 600
  assert not set(sources['train']) & set(sources['validation'] +
                                         sources['test'])
  assert offline_mt.splits(3000, 300, 300, seed=0) == data
  # Runs that differ only in training size are evaluated on the same set.
  smaller = offline_mt.splits(num_train=10, num_eval=300, num_test=5, seed=0)
  assert smaller['validation'] == data['validation']


def test_splits_deduplicate_even_when_sentences_repeat(monkeypatch):
  # A grammar with 8,400 sentences, so that draws collide often.
  monkeypatch.setattr(offline_mt, 'NOUNS', offline_mt.NOUNS[:2])
  monkeypatch.setattr(offline_mt, 'ADJECTIVES', offline_mt.ADJECTIVES[:2])
  monkeypatch.setattr(offline_mt, 'VERBS', offline_mt.VERBS[:1])
  monkeypatch.setattr(offline_mt, 'DETERMINERS', offline_mt.DETERMINERS[:1])
  monkeypatch.setattr(offline_mt, 'PREPOSITIONS', {'with': 'con'})
  assert len(set(offline_mt.generate(2000, seed=0))) < 2000
  data = offline_mt.splits(num_train=2000, num_eval=200, num_test=200, seed=0)
  sources = [s for pairs in data.values() for s, _ in pairs]
  assert len(sources) == len(set(sources)) == 2400


def test_lexicon_words_are_unambiguous():
  english, spanish = [], []
  for noun in offline_mt.NOUNS:
    english += [noun.english, noun.english_plural]
    spanish += [noun.translate(False), noun.translate(True)]
  for verb in offline_mt.VERBS:
    english += [verb.english, verb.english_plural]
    spanish += [verb.translate(False), verb.translate(True)]
  english += [a.english for a in offline_mt.ADJECTIVES]
  english += list(offline_mt.PREPOSITIONS)
  # 'de' is shared by cerca de, detras de, dentro de.
  spanish += {w for p in offline_mt.PREPOSITIONS.values() for w in p.split()}
  spanish += [form for a in offline_mt.ADJECTIVES for form in {
      a.translate(g, p) for g in 'mf' for p in (False, True)}]
  spanish_determiners = {form for d in offline_mt.DETERMINERS
                         for pair in (d.spanish, d.spanish_plural) if pair
                         for form in pair}
  # Every surface form names one lexicon entry, so a source sentence has one
  # parse and one correct translation.
  assert len(english) == len(set(english))
  assert not set(english) & set(EN_DETERMINERS)
  assert len(spanish) == len(set(spanish))
  assert not set(spanish) & spanish_determiners
  assert len(offline_mt.NOUNS) >= 80 and len(offline_mt.ADJECTIVES) >= 40
  assert len(offline_mt.VERBS) >= 30
  assert {n.gender for n in offline_mt.NOUNS} == {'m', 'f'}


def test_sentences_far_outnumber_any_training_set():
  num_dets = sum((d.english is not None) + (d.english_plural is not None)
                 for d in offline_mt.DETERMINERS)
  adjective_sequences = sum(math.perm(len(offline_mt.ADJECTIVES), k)
                            for k in range(offline_mt.MAX_ADJECTIVES + 1))
  phrases = num_dets * adjective_sequences * len(offline_mt.NOUNS)
  sentences = phrases**2 * len(offline_mt.VERBS) * (
      1 + len(offline_mt.PREPOSITIONS) * phrases)
  # Distinct derivations are distinct strings: the lexicon is unambiguous
  # and parse_english recovers the derivation (test below).
  assert sentences > 10**20  # A million times any plausible training set.


@pytest.mark.parametrize('source, target', [
    ('the big red house eats a small cat',
     'la casa roja grande come un gato pequeno'),
    ('these old white cows see an angry bear near the lake',
     'estas vacas blancas viejas ven un oso enfadado cerca del lago'),
    ('my happy sisters want two green trees with the cities',
     'mis hermanas felices quieren dos arboles verdes con las ciudades'),
    ('an ugly mouse hides many tiny keys behind each gray wall',
     'un raton feo esconde muchas llaves diminutas detras de cada pared gris'),
])
def test_translation_rules_on_examples(source, target):
  sentence = parse_english(source)
  assert sentence.english() == source
  assert sentence.spanish() == target


def test_generated_pairs_follow_the_translation_rules():
  features = spanish_features()
  spanish_nouns = {n.translate(p): (n, p) for n in offline_mt.NOUNS
                   for p in (False, True)}
  spanish_adjectives = {a.translate(g, p): a for a in offline_mt.ADJECTIVES
                        for g in 'mf' for p in (False, True)}
  num_two_adjectives = 0
  for source, target in offline_mt.generate(500, seed=3):
    sentence = parse_english(source)  # Every source word is in the lexicon.
    assert sentence.english() == source
    phrases = [sentence.subject, sentence.object]
    if sentence.preposition:
      phrases.append(sentence.prepositional_object)
    words = target.split()
    nouns = [i for i, w in enumerate(words) if w in spanish_nouns]
    assert len(nouns) == len(phrases), (source, target)
    for i, phrase in zip(nouns, phrases):
      gender, plural = phrase.noun.gender, phrase.plural
      assert spanish_nouns[words[i]] == (phrase.noun, plural)
      assert (gender, plural) in features[words[i - 1]], (source, target)
      after = words[i + 1:i + 1 + len(phrase.adjectives)]
      # Adjectives follow the noun, in reversed order, and agree with it.
      assert [spanish_adjectives[w] for w in after] == list(
          phrase.adjectives[::-1]), (source, target)
      assert all((gender, plural) in features[w] for w in after)
      num_two_adjectives += len(phrase.adjectives) == 2
    verb = words[nouns[0] + 1 + len(sentence.subject.adjectives)]
    assert verb == sentence.verb.translate(sentence.subject.plural)
    assert verb.endswith('n') == sentence.subject.plural
  assert num_two_adjectives > 100


def test_feminine_plural_agreement_in_generated_pairs():
  feminine_plural = {n.translate(True) for n in offline_mt.NOUNS
                     if n.gender == 'f'}
  adjectives = {a.translate(g, p) for a in offline_mt.ADJECTIVES
                for g in 'mf' for p in (False, True)}
  checked = 0
  for _, target in offline_mt.generate(300, seed=4):
    words = target.split()
    for i, word in enumerate(words):
      if word in feminine_plural:
        assert words[i - 1] in FEMININE_PLURAL_DETERMINERS, target
        for adjective in words[i + 1:]:
          if adjective not in adjectives:
            break
          # rojas, not rojos; invariant adjectives: grandes, azules, felices.
          assert adjective.endswith('as') or (
              adjective.endswith('es') and not adjective.endswith('oes'))
          checked += 1
  assert checked > 50


# ---------------------------------------------------------------------------
# parallel_text


def write(path, lines):
  data = ''.join(line + '\n' for line in lines).encode('utf-8')
  if str(path).endswith('.gz'):
    data = gzip.compress(data)
  path.write_bytes(data)


def test_read_parallel_plain_and_gzipped(tmp_path):
  write(tmp_path / 'train.de', ['Ein Mädchen. ', 'Zwei Hunde\r'])
  write(tmp_path / 'train.en.gz', ['A girl.', 'Two dogs'])
  assert parallel_text.read_parallel(str(tmp_path), 'train', 'en', 'de') == [
      ('A girl.', 'Ein Mädchen.'), ('Two dogs', 'Zwei Hunde')]
  assert parallel_text.read_parallel(str(tmp_path), 'train', 'de', 'en')[0] == (
      'Ein Mädchen.', 'A girl.')


def test_available_splits_need_both_sides(tmp_path):
  for name in ('train.de', 'train.en.gz', 'val.de.gz', 'val.en',
               'test_2016_flickr.de', 'README'):
    write(tmp_path / name, ['x'])
  assert parallel_text.available_splits(str(tmp_path), 'de', 'en') == [
      'train', 'val']


def test_pairs_with_an_empty_side_are_dropped_and_counted(tmp_path,
                                                          monkeypatch):
  warnings = []
  monkeypatch.setattr(parallel_text.logging, 'warning',
                      lambda msg, *args: warnings.append(msg % args))
  write(tmp_path / 'val.de', ['a', '', 'c', '  ', 'e'])
  write(tmp_path / 'val.en', ['A', 'B', '', 'D', 'E'])
  pairs = parallel_text.read_parallel(str(tmp_path), 'val', 'de', 'en')
  assert pairs == [('a', 'A'), ('e', 'E')]
  assert len(warnings) == 1 and 'Dropped 3 of 5' in warnings[0]


def test_read_parallel_errors_say_what_and_how(tmp_path):
  with raises_naming(FileNotFoundError, str(tmp_path / 'nope'),
                     'does not exist', '{split}.{lang}'):
    parallel_text.read_parallel(str(tmp_path / 'nope'), 'train', 'de', 'en')
  write(tmp_path / 'train.de', ['a', 'b'])
  with pytest.raises(FileNotFoundError) as info:
    parallel_text.read_parallel(str(tmp_path), 'train', 'de', 'en')
  assert 'train.en or train.en.gz' in str(info.value)
  assert "['train.de']" in str(info.value)
  write(tmp_path / 'train.en.gz', ['A'])
  with pytest.raises(ValueError) as info:
    parallel_text.read_parallel(str(tmp_path), 'train', 'de', 'en')
  for part in ('2 in', 'train.de', '1 in', 'train.en.gz'):
    assert part in str(info.value)
  write(tmp_path / 'train.en', ['A', 'B'])
  with raises_naming(ValueError, 'train.en.gz', 'remove one'):
    parallel_text.read_parallel(str(tmp_path), 'train', 'de', 'en')


def test_an_empty_or_fully_filtered_split_is_refused_naming_it(tmp_path):
  """No evaluation over nothing: an empty split, or one whose every pair
  has an empty side, is named with its files and what to do."""
  write(tmp_path / 'val.de', [])
  write(tmp_path / 'val.en', [])
  with raises_naming(ValueError, 'val.de', 'val.en', "'val' split",
                     'config.data.path'):
    parallel_text.read_parallel(str(tmp_path), 'val', 'de', 'en')
  write(tmp_path / 'val.de', ['a', ''])
  write(tmp_path / 'val.en', ['', 'B'])
  with raises_naming(ValueError, 'no line pair', '2 lines'):
    parallel_text.read_parallel(str(tmp_path), 'val', 'de', 'en')


def test_empty_validation_text_names_the_field_that_points_at_it(tmp_path):
  import ml_collections  # pylint: disable=g-import-not-at-top
  from transformer.data import sources  # pylint: disable=g-import-not-at-top
  (tmp_path / 'train.txt').write_text('the cat sat\n')
  (tmp_path / 'eval.txt').write_text('\n \n')
  data = ml_collections.ConfigDict(dict(
      source='local', path=str(tmp_path / 'train.txt'), per='line',
      eval_path=str(tmp_path / 'eval.txt'), train_fraction=0.9))
  assert sources.read('documents', data, 'train') == ['the cat sat']
  with raises_naming(ValueError, 'eval.txt holds no text',
                     'config.data.eval_path'):
    sources.read('documents', data, 'validation')


def test_multi30k():
  if not os.path.isdir(MULTI30K):
    pytest.skip(f'{MULTI30K} is absent')
  assert parallel_text.available_splits(MULTI30K, 'de', 'en') == [
      'test_2016_flickr', 'train', 'val']
  sizes = {split: len(parallel_text.read_parallel(MULTI30K, split, 'de', 'en'))
           for split in ('train', 'val', 'test_2016_flickr')}
  assert sizes == {'train': 29000, 'val': 1014, 'test_2016_flickr': 1000}
  first = parallel_text.read_parallel(MULTI30K, 'train', 'en', 'de')[0]
  assert first[0] == 'Two young, White males are outside near many bushes.'
  assert first[1].startswith('Zwei junge weiße Männer')
