"""An English -> Spanish-like translation task generated in-process.

The default experiment and the tests need a translation task without a
network, one that cannot be solved by memorising sentences or by copying word
by word. Sentences follow

    sentence = NP(subject) VERB NP(object) [PREPOSITION NP]
    NP       = DETERMINER ADJECTIVE{0,2} NOUN,   singular or plural

over a hand-written lexicon of real words (plain ASCII: Spanish accents and
the tilde are dropped, e.g. pequeno). The translation needs attention to
more than the aligned word:

- adjectives follow the noun, in reversed order when there are two:
  "the big red house" -> "la casa roja grande";
- determiners and adjectives agree in gender and number with their noun, so
  "the" is el / la / los / las depending on a word further right;
- the verb agrees in number with the subject: eats / eat -> come / comen;
- "de el" contracts to "del": "near the cat" -> "cerca del gato".

The lexicon has 112 nouns, 54 adjectives, 47 verbs, 10 determiners and 8
prepositions: 394 English and 537 Spanish word forms. It generates 5.4e22
distinct sentences (`tests/data/test_data_sources.py` counts them), far more than
any training set, so held-out sentences are new combinations of known words.
"""

from __future__ import annotations

import dataclasses
import random

Pair = tuple[str, str]


@dataclasses.dataclass(frozen=True)
class Noun:
  """A noun with its English plural and Spanish gender."""
  english: str
  english_plural: str
  spanish: str
  gender: str  # 'm' or 'f'

  def translate(self, plural: bool) -> str:
    return _spanish_plural(self.spanish) if plural else self.spanish


@dataclasses.dataclass(frozen=True)
class Adjective:
  """An adjective; Spanish forms follow from the masculine singular."""
  english: str
  spanish: str  # masculine singular

  def translate(self, gender: str, plural: bool) -> str:
    word = self.spanish
    # Adjectives in -o inflect for gender (rojo/roja); others (grande, azul,
    # feliz) have one form for both genders.
    if gender == 'f' and word.endswith('o'):
      word = word[:-1] + 'a'
    return _spanish_plural(word) if plural else word


@dataclasses.dataclass(frozen=True)
class Verb:
  """A transitive verb in the present tense, 3rd person."""
  english: str  # third person singular: eats
  english_plural: str  # eat
  spanish: str  # third person singular: come

  def translate(self, plural: bool) -> str:
    # The Spanish 3rd person plural of the present tense is always the
    # singular + n (come/comen, quiere/quieren, ve/ven).
    return self.spanish + 'n' if plural else self.spanish


@dataclasses.dataclass(frozen=True)
class Determiner:
  """A determiner; some exist in one number only (each; many, two)."""
  english: str | None  # singular form, None if the determiner has none
  english_plural: str | None
  spanish: tuple[str, str] | None  # (masculine, feminine) singular
  spanish_plural: tuple[str, str] | None

  def translate(self, gender: str, plural: bool) -> str:
    masculine, feminine = self.spanish_plural if plural else self.spanish
    return feminine if gender == 'f' else masculine


def _spanish_plural(word: str) -> str:
  if word[-1] in 'aeiou':
    return word + 's'
  if word.endswith('z'):
    return word[:-1] + 'ces'
  return word + 'es'


def _table(text: str) -> list[list[str]]:
  return [line.split() for line in text.strip().splitlines()]


# english singular, english plural, spanish singular, gender.
NOUNS = tuple(Noun(*row) for row in _table("""
cat cats gato m
dog dogs perro m
book books libro m
tree trees arbol m
car cars coche m
boy boys nino m
man men hombre m
horse horses caballo m
bird birds pajaro m
friend friends amigo m
teacher teachers maestro m
doctor doctors medico m
farmer farmers granjero m
king kings rey m
wolf wolves lobo m
bear bears oso m
mouse mice raton m
lion lions leon m
rabbit rabbits conejo m
pig pigs cerdo m
bull bulls toro m
monkey monkeys mono m
tiger tigers tigre m
duck ducks pato m
brother brothers hermano m
son sons hijo m
uncle uncles tio m
grandfather grandfathers abuelo m
neighbor neighbors vecino m
soldier soldiers soldado m
baker bakers panadero m
painter painters pintor m
garden gardens jardin m
airplane airplanes avion m
truck trucks camion m
train trains tren m
boat boats barco m
hat hats sombrero m
shoe shoes zapato m
clock clocks reloj m
pencil pencils lapiz m
glass glasses vaso m
plate plates plato m
mirror mirrors espejo m
cake cakes pastel m
egg eggs huevo m
lemon lemons limon m
river rivers rio m
lake lakes lago m
forest forests bosque m
field fields campo m
road roads camino m
bridge bridges puente m
castle castles castillo m
market markets mercado m
museum museums museo m
village villages pueblo m
house houses casa f
woman women mujer f
girl girls nina f
mother mothers madre f
sister sisters hermana f
daughter daughters hija f
aunt aunts tia f
grandmother grandmothers abuela f
queen queens reina f
nurse nurses enfermera f
princess princesses princesa f
cow cows vaca f
goat goats cabra f
frog frogs rana f
bee bees abeja f
spider spiders arana f
snake snakes serpiente f
turtle turtles tortuga f
chicken chickens gallina f
flower flowers flor f
star stars estrella f
moon moons luna f
cloud clouds nube f
city cities ciudad f
street streets calle f
church churches iglesia f
school schools escuela f
library libraries biblioteca f
kitchen kitchens cocina f
table tables mesa f
chair chairs silla f
window windows ventana f
door doors puerta f
box boxes caja f
key keys llave f
letter letters carta f
cup cups taza f
bottle bottles botella f
lamp lamps lampara f
shirt shirts camisa f
bag bags bolsa f
guitar guitars guitarra f
wall walls pared f
island islands isla f
beach beaches playa f
mountain mountains montana f
farm farms granja f
apple apples manzana f
pear pears pera f
carrot carrots zanahoria f
doll dolls muneca f
machine machines maquina f
wheel wheels rueda f
song songs cancion f
painting paintings pintura f
"""))

# english, spanish masculine singular.
ADJECTIVES = tuple(Adjective(*row) for row in _table("""
big grande
small pequeno
red rojo
green verde
blue azul
yellow amarillo
black negro
white blanco
gray gris
pink rosado
old viejo
new nuevo
young joven
happy feliz
sad triste
tall alto
long largo
beautiful hermoso
ugly feo
fast rapido
slow lento
strong fuerte
weak debil
rich rico
poor pobre
hot caliente
cold frio
clean limpio
dirty sucio
quiet tranquilo
loud ruidoso
heavy pesado
soft blando
hard duro
dark oscuro
bright brillante
brave valiente
lazy perezoso
hungry hambriento
tired cansado
angry enfadado
famous famoso
strange extrano
clever listo
funny gracioso
wild salvaje
round redondo
empty vacio
full lleno
sweet dulce
dry seco
wet mojado
huge enorme
tiny diminuto
"""))

# english 3rd person singular, plural, spanish 3rd person singular.
VERBS = tuple(Verb(*row) for row in _table("""
sees see ve
eats eat come
finds find encuentra
follows follow sigue
watches watch mira
carries carry lleva
pushes push empuja
helps help ayuda
calls call llama
visits visit visita
paints paint pinta
draws draw dibuja
chases chase persigue
catches catch atrapa
touches touch toca
holds hold sostiene
buys buy compra
sells sell vende
loves love ama
hates hate odia
wants want quiere
needs need necesita
opens open abre
closes close cierra
breaks break rompe
washes wash lava
reads read lee
writes write escribe
greets greet saluda
remembers remember recuerda
forgets forget olvida
knows know conoce
kicks kick patea
bites bite muerde
hugs hug abraza
kisses kiss besa
hides hide esconde
takes take toma
brings bring trae
throws throw lanza
builds build construye
repairs repair repara
admires admire admira
protects protect protege
feeds feed alimenta
attacks attack ataca
hears hear oye
"""))

DETERMINERS = (
    Determiner('the', 'the', ('el', 'la'), ('los', 'las')),
    Determiner('a', 'some', ('un', 'una'), ('unos', 'unas')),
    Determiner('this', 'these', ('este', 'esta'), ('estos', 'estas')),
    Determiner('that', 'those', ('ese', 'esa'), ('esos', 'esas')),
    Determiner('my', 'my', ('mi', 'mi'), ('mis', 'mis')),
    Determiner('your', 'your', ('tu', 'tu'), ('tus', 'tus')),
    Determiner('each', None, ('cada', 'cada'), None),
    Determiner(None, 'many', None, ('muchos', 'muchas')),
    Determiner(None, 'two', None, ('dos', 'dos')),
    Determiner(None, 'three', None, ('tres', 'tres')),
)

PREPOSITIONS = {
    'with': 'con',
    'without': 'sin',
    'near': 'cerca de',
    'under': 'bajo',
    'on': 'sobre',
    'behind': 'detras de',
    'toward': 'hacia',
    'inside': 'dentro de',
}

MAX_ADJECTIVES = 2


@dataclasses.dataclass(frozen=True)
class NounPhrase:
  """DETERMINER ADJECTIVE* NOUN, singular or plural."""
  determiner: Determiner
  adjectives: tuple[Adjective, ...]  # in English order
  noun: Noun
  plural: bool

  def english(self) -> list[str]:
    words = [a.english for a in self.adjectives]
    words.append(self.noun.english_plural if self.plural else self.noun.english)
    determiner = (self.determiner.english_plural if self.plural
                  else self.determiner.english)
    if determiner == 'a' and words[0][0] in 'aeiou':
      determiner = 'an'
    return [determiner] + words

  def spanish(self) -> list[str]:
    gender = self.noun.gender
    return ([self.determiner.translate(gender, self.plural),
             self.noun.translate(self.plural)] +
            [a.translate(gender, self.plural) for a in self.adjectives[::-1]])


@dataclasses.dataclass(frozen=True)
class Sentence:
  """SUBJECT VERB OBJECT [PREPOSITION NOUN_PHRASE]."""
  subject: NounPhrase
  verb: Verb
  object: NounPhrase
  preposition: str | None = None  # an English key of PREPOSITIONS
  prepositional_object: NounPhrase | None = None

  def english(self) -> str:
    verb = (self.verb.english_plural if self.subject.plural
            else self.verb.english)
    words = self.subject.english() + [verb] + self.object.english()
    if self.preposition:
      words += [self.preposition] + self.prepositional_object.english()
    return ' '.join(words)

  def spanish(self) -> str:
    words = (self.subject.spanish() + [self.verb.translate(self.subject.plural)]
             + self.object.spanish())
    if self.preposition:
      phrase = self.prepositional_object.spanish()
      preposition = PREPOSITIONS[self.preposition]
      if preposition.endswith(' de') and phrase[0] == 'el':
        preposition, phrase[0] = preposition[:-3], 'del'
      words += [preposition] + phrase
    return ' '.join(words)


def sample_noun_phrase(rng: random.Random) -> NounPhrase:
  """Uniform number, determiner, 0-2 distinct adjectives and noun."""
  plural = rng.random() < 0.5
  determiner = rng.choice([d for d in DETERMINERS
                           if (d.spanish_plural if plural else d.spanish)])
  num_adjectives = rng.randint(0, MAX_ADJECTIVES)
  return NounPhrase(determiner=determiner,
                    adjectives=tuple(rng.sample(ADJECTIVES, num_adjectives)),
                    noun=rng.choice(NOUNS), plural=plural)


def sample_sentence(rng: random.Random) -> Sentence:
  """A sentence with a prepositional phrase half of the time."""
  subject = sample_noun_phrase(rng)
  verb = rng.choice(VERBS)
  obj = sample_noun_phrase(rng)
  if rng.random() < 0.5:
    return Sentence(subject, verb, obj)
  return Sentence(subject, verb, obj, rng.choice(list(PREPOSITIONS)),
                  sample_noun_phrase(rng))


def sample_pair(rng: random.Random, max_clauses: int = 1) -> Pair:
  """One (english, spanish) pair of 1..max_clauses sentences joined by
  'and' / 'y', so that lengths span a wide range (about 5 to 17 words per
  clause)."""
  clauses = rng.randint(1, max_clauses) if max_clauses > 1 else 1
  sentences = [sample_sentence(rng) for _ in range(clauses)]
  return (' and '.join(s.english() for s in sentences),
          ' y '.join(s.spanish() for s in sentences))


def generate(num_examples: int, seed: int,
             max_clauses: int = 1) -> list[Pair]:
  """Returns `num_examples` (english, spanish) pairs, the same for a seed.

  Sentences are drawn independently, so a long list may repeat one; use
  `splits` for held-out sets.
  """
  rng = random.Random(seed)
  return [sample_pair(rng, max_clauses) for _ in range(num_examples)]


def splits(num_train: int, num_eval: int, num_test: int,
           seed: int, max_clauses: int = 1) -> dict[str, list[Pair]]:
  """Returns 'train', 'validation' and 'test' pairs with no repeated source.

  No source sentence occurs twice, within a split or across splits, so
  held-out scores measure generalisation. Each split draws from its own
  random stream, held-out splits first: the validation set depends only on
  (num_eval, seed), so runs with different training sizes are evaluated on
  the same sentences.
  """
  seen = set()
  result = {}
  for split, count in (('validation', num_eval), ('test', num_test),
                       ('train', num_train)):
    # A string seed is hashed with SHA-512, so streams are reproducible
    # across processes and independent across splits and seeds.
    rng = random.Random(f'{split}:{seed}')
    pairs = []
    while len(pairs) < count:
      source, target = sample_pair(rng, max_clauses)
      if source not in seen:
        seen.add(source)
        pairs.append((source, target))
    result[split] = pairs
  return result
