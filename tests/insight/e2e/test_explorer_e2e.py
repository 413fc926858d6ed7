"""The attention explorer page of a trained workdir, in a real headless
Chromium (playwright): it loads without console errors, the layer and head
controls change what is drawn, hovering a token shows the attention row the
workdir's weights give, the model view holds every layer and head, a
screenshot is not blank, and hostile text (`</script>`, `<!--<script>`,
...) is shown exactly in the browser. The browser tests skip, saying why,
where no browser is installed (.ci/run installs Debian's Chromium)."""

import io
import pathlib
import shutil

import numpy as np
import pytest

from conftest import HOSTILE
from conftest import raises_naming
from transformer.tools import explore


CHROMIUM = next((path for path in map(shutil.which, (
    'chromium', 'chromium-browser', 'google-chrome')) if path), None)


TEXT = 'the red house sees a cat'


@pytest.fixture(scope='module')
def written(trained, tmp_path_factory):
  path = tmp_path_factory.mktemp('explorer') / 'page.html'
  return explore.explore(str(trained), TEXT, str(path))


@pytest.fixture(scope='module')
def browser():
  sync_api = pytest.importorskip(
      'playwright.sync_api', reason='playwright is not installed (pip '
      'install -e ".[test]")')
  if CHROMIUM is None:
    pytest.skip('no Chromium to run the page in: apt-get install chromium '
                '(.ci/run does)')
  with sync_api.sync_playwright() as playwright:
    browser = playwright.chromium.launch(executable_path=CHROMIUM,
                                         args=['--no-sandbox'])
    yield browser
    browser.close()


@pytest.fixture
def page(written, browser):
  path, _ = written
  page = browser.new_page(viewport={'width': 1100, 'height': 900})
  errors = []
  page.on('console', lambda m: errors.append(m.text)
          if m.type == 'error' else None)
  page.on('pageerror', lambda e: errors.append(str(e)))
  page.goto(f'file://{path}')
  yield page
  assert not errors, errors
  page.close()


def _row(page, query):
  page.hover(f'#qcol .token[data-index="{query}"]')
  return [float(w) for w in page.eval_on_selector_all(
      '#kcol .token', 'spans => spans.map(s => s.dataset.weight)')]


def test_page_is_self_contained_and_holds_every_view(written):
  path, views = written
  html = open(path, encoding='utf-8').read()
  # Nothing loaded from elsewhere: no external scripts, styles, images or
  # requests (the SVG namespace is a name, not a download).
  for outside in ('<script src', '<link', '<img src', 'fetch(',
                  'XMLHttpRequest', 'import('):
    assert outside not in html, outside
  assert [v.name for v in views] == [
      'encoder self-attention', 'decoder self-attention',
      'decoder attention over the source']
  assert TEXT in html


def test_hovering_a_token_shows_its_row_of_the_chosen_head(written, page):
  _, views = written
  weights = views[0].weights  # encoder self-attention [L, N, T, S]
  page.select_option('#head', '1')
  np.testing.assert_allclose(_row(page, 2), weights[0, 1, 2], atol=1e-4)
  page.select_option('#head', '3')
  np.testing.assert_allclose(_row(page, 2), weights[0, 3, 2], atol=1e-4)
  assert np.abs(weights[0, 1, 2] - weights[0, 3, 2]).max() > 1e-3
  page.select_option('#head', 'all')
  np.testing.assert_allclose(_row(page, 0), weights[0, :, 0].mean(0),
                             atol=1e-3)
  # Only the hovered token's lines are drawn, with its weights.
  lines = page.eval_on_selector_all(
      '#lines line', 'ls => ls.map(l => [l.dataset.query, l.dataset.weight])')
  assert {q for q, _ in lines} == {'0'}
  np.testing.assert_allclose([float(w) for _, w in lines],
                             weights[0, :, 0].mean(0), atol=1e-3)


def test_views_layers_and_the_model_view(written, page):
  _, views = written
  cross = views[2]
  page.select_option('#view', '2')  # decoder attention over the source
  assert page.eval_on_selector_all('#kcol .token', 'ts => ts.length') == len(
      cross.keys)
  assert page.eval_on_selector_all('#qcol .token', 'ts => ts.length') == len(
      cross.queries)
  page.mouse.move(900, 800)  # hover nothing: every line is drawn
  assert page.eval_on_selector_all('#lines line', 'ls => ls.length') == (
      len(cross.queries) * len(cross.keys))
  layers, heads = cross.weights.shape[:2]
  assert page.eval_on_selector_all('#modelview canvas', 'cs => cs.length') == (
      layers * heads)
  # Each map's caption gives its head's mean entropy over its rows.
  shown = page.eval_on_selector_all(
      '#modelview figure', 'fs => fs.map(f => Number(f.dataset.entropy))')
  w = cross.weights.reshape(layers * heads, *cross.weights.shape[2:])
  logs = np.log(np.where(w > 0, w, 1.0))
  np.testing.assert_allclose(shown, -(w * logs).sum(-1).mean(-1), atol=2e-3)
  # Attention over another sequence has no distance; self-attention has.
  assert page.eval_on_selector_all(
      '#modelview figure', 'fs => fs.filter(f => f.dataset.distance).length'
  ) == 0
  page.select_option('#view', '0')  # encoder self-attention
  encoder = written[1][0]
  shown = page.eval_on_selector_all(
      '#modelview figure', 'fs => fs.map(f => Number(f.dataset.distance))')
  w = encoder.weights.reshape(-1, *encoder.weights.shape[2:])
  gaps = np.abs(np.subtract.outer(np.arange(w.shape[1]),
                                  np.arange(w.shape[2])))
  kept = w.sum(-1) > 0
  expected = [((m * gaps).sum(-1))[k].mean() for m, k in zip(w, kept)]
  np.testing.assert_allclose(shown, expected, atol=2e-3)
  page.select_option('#view', '2')
  # Clicking a map opens its layer and head.
  page.click(f'#modelview figure[data-layer="0"][data-head="{heads - 1}"]')
  assert page.input_value('#head') == str(heads - 1)
  np.testing.assert_allclose(_row(page, 1), cross.weights[0, -1, 1],
                             atol=1e-4)
  # The heatmap replaces the lines.
  page.select_option('#mode', 'heatmap')
  assert page.is_visible('#heatmap') and not page.is_visible('#lines')


def test_screenshot_is_not_blank(page, tmp_path):
  from PIL import Image  # pylint: disable=g-import-not-at-top
  page.hover('#qcol .token[data-index="1"]')
  shot = np.asarray(Image.open(io.BytesIO(page.screenshot(full_page=True)))
                    .convert('L'), np.float32)
  assert shot.std() > 20  # text, lines and coloured maps on white
  assert (shot < 128).mean() > 0.01


@pytest.fixture(scope='module')
def vit_page(tmp_path_factory):
  from PIL import Image  # pylint: disable=g-import-not-at-top
  from conftest import load_experiment  # pylint: disable=g-import-not-at-top
  from transformer import train  # pylint: disable=g-import-not-at-top
  root = tmp_path_factory.mktemp('vit')
  config = load_experiment('vit_offline', 'runlocal')
  config.train.update(dict(num_steps=3, eval_every=3, checkpoint_every=3))
  train.train_and_evaluate(config, str(root / 'run'))
  picture = np.random.default_rng(0).integers(0, 255, (40, 40, 3), np.uint8)
  Image.fromarray(picture).save(root / 'image.png')
  return explore.explore(str(root / 'run'), output=str(root / 'page.html'),
                         image=str(root / 'image.png'))


def test_a_vit_page_overlays_each_tokens_attention_on_the_image(vit_page,
                                                                browser):
  path, [view] = vit_page
  assert view.first_patch == 1 and view.queries[0] == '[CLS]'
  assert len(view.keys) == 1 + view.grid ** 2
  page = browser.new_page()
  errors = []
  page.on('pageerror', lambda e: errors.append(str(e)))
  page.goto(f'file://{path}')
  assert page.is_visible('#picture') and page.is_visible('#overlay')
  page.select_option('#head', '0')
  overlays = []
  for query in (0, 3):
    np.testing.assert_allclose(_row(page, query), view.weights[0, 0, query],
                               atol=1e-4)
    assert page.get_attribute('#overlay', 'data-query') == str(query)
    overlays.append(page.eval_on_selector('#overlay', 'c => c.toDataURL()'))
  assert overlays[0] != overlays[1]  # each token's own map
  assert not errors, errors
  page.close()


def test_hostile_text_is_shown_as_text_in_the_browser(hostile, browser):
  path, view = hostile
  page = browser.new_page()
  errors = []
  page.on('pageerror', lambda e: errors.append(str(e)))
  page.on('dialog', lambda d: errors.append(f'dialog {d.message}'))
  page.goto(f'file://{path}')
  texts = lambda selector: page.eval_on_selector_all(
      selector, 'es => es.map(e => e.textContent)')
  assert texts('#qcol .token') == HOSTILE
  assert texts('#kcol .token') == HOSTILE[::-1]
  assert texts('#view option') == [view.name]
  assert texts('#title') == ['<!--<script> ' + HOSTILE[-1]]
  assert texts('#input') == [''.join(HOSTILE)]
  assert page.eval_on_selector_all('#modelview canvas', 'cs => cs.length') == 2
  assert page.eval_on_selector_all('img', 'is => is.length') == 1  # #picture
  assert not errors, errors
  page.close()


def test_an_image_sent_as_bytes_reads_as_its_file(vit_page):
  """`explore --serve` passes an image sent by its form as bytes (it opens
  no path a request names): the same attention as the file."""
  path, [view] = vit_page
  root = pathlib.Path(path).parent
  model = explore.Explorer(str(root / 'run'))
  [sent] = model.views(image=(root / 'image.png').read_bytes())
  np.testing.assert_allclose(sent.weights, view.weights, atol=1e-6)
  with raises_naming(ValueError, 'file sent', 'PNG or JPEG'):
    model.views(image=b'not an image')


def test_the_served_form_sends_the_chosen_image_file(vit_page, browser):
  """`explore --serve` of a ViT: the browser sends the file chosen in the
  form (never a path), and the page shows that image's attention."""
  import threading  # pylint: disable=g-import-not-at-top
  from transformer.tools import explorer_server  # pylint: disable=g-import-not-at-top
  path, [view] = vit_page
  root = pathlib.Path(path).parent
  server = explorer_server.make_server(explore.Explorer(str(root / 'run')), 0)
  threading.Thread(target=server.serve_forever, args=(0.02,),
                   daemon=True).start()
  page = browser.new_page()
  try:
    page.goto(f'http://localhost:{server.server_address[1]}/')
    assert not page.is_visible('#picture')  # the form alone
    page.set_input_files('input[name="image"]', str(root / 'image.png'))
    with page.expect_navigation():
      page.click('#ask button')
    assert page.is_visible('#picture')
    assert page.text_content('#input') == 'image.png'
    page.select_option('#head', '0')
    np.testing.assert_allclose(_row(page, 3), view.weights[0, 0, 3],
                               atol=1e-4)
  finally:
    page.close()
    server.shutdown()
    server.server_close()


def test_a_page_already_there_is_kept_unless_overwrite(trained, tmp_path):
  """The one rule of the commands that write files: an existing page is
  refused before any work, and replaced only with overwrite."""
  path = tmp_path / 'page.html'
  path.write_text('mine')
  with raises_naming(FileExistsError, str(path), '--overwrite'):
    explore.explore(str(trained), TEXT, str(path))
  assert path.read_text() == 'mine'
  explore.explore(str(trained), TEXT, str(path), overwrite=True)
  assert 'sees' in path.read_text()
