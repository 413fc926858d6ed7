"""A Google Cloud Storage emulator on 127.0.0.1 for tests of gs:// workdirs.

`gcp-storage-emulator` serves the JSON API but not object generations'
preconditions, which TensorStore (orbax's array writes) relies on: writes
with `ifGenerationMatch`, reads with `ifGenerationNotMatch`, and the
`x-goog-generation` header of a download. `start()` adds them to its
handlers, then serves from memory in a thread of the test process.
"""

from __future__ import annotations

from http import HTTPStatus
import os
import socket
from typing import Callable

from gcp_storage_emulator import server as server_lib
from gcp_storage_emulator.exceptions import NotFound
from gcp_storage_emulator.handlers import objects

_WRAPPED = '_with_preconditions'


def _generation(storage, request) -> str | None:
  try:
    obj = storage.get_file_obj(request.params['bucket_name'],
                               request.params['object_id'])
  except (NotFound, KeyError):
    return None
  return str(obj['generation'])


def _object_name(request) -> dict:
  """insert names its object in the query (?name=...), not the path."""
  params = dict(request.params)
  if 'object_id' not in params:
    names = request.query.get('name')
    if names:
      params['object_id'] = names[0]
  return params


class _Named:
  def __init__(self, request):
    self.params = _object_name(request)


def _failed(request, current: str | None) -> HTTPStatus | None:
  """The status a precondition of the request answers, if one fails."""
  match = request.query.get('ifGenerationMatch')
  if match is not None and (current or '0') != match[0]:
    return HTTPStatus.PRECONDITION_FAILED
  not_match = request.query.get('ifGenerationNotMatch')
  if not_match is not None and current == not_match[0]:
    return HTTPStatus.NOT_MODIFIED
  return None


def _with_preconditions(handler: Callable) -> Callable:
  if getattr(handler, _WRAPPED, False):
    return handler

  def wrapped(request, response, storage, *args, **kwargs):
    current = _generation(storage, _Named(request))
    status = _failed(request, current)
    if status is not None:
      response.status = status
      return None
    result = handler(request, response, storage, *args, **kwargs)
    current = _generation(storage, _Named(request))
    if current is not None and response.status in (HTTPStatus.OK,
                                                   HTTPStatus.PARTIAL_CONTENT):
      response['x-goog-generation'] = current
      response['x-goog-metageneration'] = '1'
    return result

  setattr(wrapped, _WRAPPED, True)
  return wrapped


def _patch_handlers() -> None:
  for name in ('get', 'download', 'insert', 'delete'):
    original = getattr(objects, name)
    wrapped = _with_preconditions(original)
    setattr(objects, name, wrapped)
    for _, methods in server_lib.HANDLERS:
      for method, handler in list(methods.items()):
        if handler is original:
          methods[method] = wrapped


def start(bucket: str):
  """(server, url) of an emulator holding an empty `bucket`."""
  _patch_handlers()
  with socket.socket() as probe:
    probe.bind(('127.0.0.1', 0))
    port = probe.getsockname()[1]
  server = server_lib.create_server('127.0.0.1', port, in_memory=True,
                                    default_bucket=bucket)
  server.start()
  return server, f'http://127.0.0.1:{port}'


def environment(url: str) -> dict[str, str]:
  """What a process needs to reach the emulator: gcsfs (epath's backend
  where TensorFlow is not used) and TensorStore, without credentials."""
  return {**os.environ, 'STORAGE_EMULATOR_HOST': url,
          'TENSORSTORE_GCS_HTTP_URL': url, 'EPATH_USE_TF': 'false',
          'GOOGLE_AUTH_TOKEN_FOR_TESTING': 'test', 'JAX_PLATFORMS': 'cpu'}
