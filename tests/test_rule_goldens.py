"""Frozen goldens for the over-keep contract, written here and not read from `rules`.

Every other "no rule lost" check asks the detector itself (or the C reducer built from
the same word list), so a word deleted from `rules.CATEGORIES` would pass them all.
These sentences are frozen: each states a rule through the words of one category (or
one language) only, sits in a description long enough to be reduced, and must come out
word for word, while the control sentence in the same place is dropped. Deleting a
category, or a language's words, from the detector fails at least one case here.
"""

from __future__ import annotations

import orjson
import pytest

from caveman_batch import describe
from caveman_batch.catalog import compress

# A lead, and two sentences that state nothing the contract protects, per language.
FRAMES = {
    "en": ("Fetches the weather report for a city.",
           "The report comes from a public network of weather stations.",
           "Results hold temperature, humidity and wind speed."),
    "de": ("Liefert den Wetterbericht einer Stadt.",
           "Die Daten stammen von einem Netz öffentlicher Wetterstationen.",
           "Der Bericht enthält Temperatur, Feuchte und Wind."),
    "es": ("Obtiene el parte del tiempo de una ciudad.",
           "Los datos vienen de una red pública de estaciones.",
           "El parte trae temperatura, humedad y viento."),
    "pt": ("Obtém a previsão do tempo de uma cidade.",
           "Os dados vêm de uma rede pública de estações.",
           "A previsão traz temperatura, umidade e vento."),
    "fr": ("Récupère la météo d'une ville.",
           "Les données viennent d'un réseau public de stations.",
           "Le bulletin donne la température, l'humidité et le vent."),
}
CONTROL = {
    "en": "The station list is refreshed every night by the provider.",
    "de": "Die Liste der Stationen wird jede Nacht erneuert.",
    "es": "La lista de estaciones se renueva cada noche.",
    "pt": "A lista de estações é renovada toda noite.",
    "fr": "La liste des stations est renouvelée chaque nuit.",
}

# (category or language, language of the frame, the rule sentence)
GOLDENS = [
    ("obligation", "en", "The token is mandatory for private stations."),
    ("obligation", "en", "You must pass the station code."),
    ("negation", "en", "Archived stations are not listed."),
    ("negation", "en", "The call works without a key."),
    ("limit", "en", "The radius is at most 50 km."),
    ("limit", "en", "Returns up to 20 results."),
    ("format", "en", "Dates are given in ISO 8601."),
    ("format", "en", "The city name is case-sensitive."),
    ("default", "en", "The unit defaults to celsius."),
    ("default", "en", "The country field is optional."),
    ("choice", "en", "Give exactly one of city or coordinates."),
    ("choice", "en", "Stations are listed by name rather than by code."),
    ("warning", "en", "The hourly endpoint is deprecated."),
    ("warning", "en", "Resetting a station is irreversible."),
    ("selection", "en", "It is best for short forecasts."),
    ("selection", "en", "Avoid calling it in a tight loop."),
    ("instruction", "en", "Provide the station code for the hourly report."),
    # an imperative the unit does not open with (corpus shapes: "Example: Use …", "1) Use …")
    ("instruction", "en", "Example: Use 8 for a quick forecast."),
    ("instruction", "en", "Station id 0417 Provide it for the hourly report."),
    ("signal", "en", "The wind speed must stay ≤ 120 for a valid reading."),
    ("signal", "en", "⚠ Readings from mountain stations lag by a day."),
    ("german", "de", "Der Wert muss positiv sein."),
    ("german", "de", "Das Feld ist nur lesbar."),
    ("german", "de", "Stationen im Ausbau werden nicht gezeigt."),
    ("spanish", "es", "El código de estación es obligatorio."),
    ("spanish", "es", "La fecha debe ir en el formato local."),
    ("spanish", "es", "Sólo se listan estaciones activas."),
    ("portuguese", "pt", "O código da estação é obrigatório."),
    ("portuguese", "pt", "A unidade padrão é celsius."),
    ("portuguese", "pt", "O valor deve ser positivo."),
    ("french", "fr", "La valeur doit être positive."),
    ("french", "fr", "Le code de station est obligatoire."),
    ("french", "fr", "Les stations fermées ne sont jamais listées."),
]


def description(lang: str, middle: str) -> str:
    lead, filler1, filler2 = FRAMES[lang]
    return f"{lead} {filler1} {middle} {filler2}"


@pytest.mark.parametrize("lang", sorted(FRAMES))
def test_the_frame_alone_is_reduced(lang: str) -> None:
    """The control: in the same place, a sentence that states no rule goes."""
    text = description(lang, CONTROL[lang])
    assert len(text.encode()) > describe.SHORT_BYTES
    out = describe.reduce(text)
    assert CONTROL[lang] not in out
    assert out.startswith(FRAMES[lang][0][:40])


@pytest.mark.parametrize(("category", "lang", "rule"), GOLDENS,
                         ids=[f"{c}-{i}" for i, (c, _, _) in enumerate(GOLDENS)])
def test_a_rule_sentence_is_kept_word_for_word(category: str, lang: str, rule: str) -> None:
    text = description(lang, rule)
    assert len(text.encode()) > describe.SHORT_BYTES
    for out in (describe.reduce(text), describe.explain(text).text):  # C if built, and Python
        assert rule in out, (category, out)
        assert FRAMES[lang][1] not in out  # the reduction did run: the filler went


def test_goldens_cover_every_category_and_language() -> None:
    covered = {c for c, _, _ in GOLDENS}
    assert {"obligation", "negation", "limit", "format", "default", "choice", "warning",
            "selection", "german", "spanish", "portuguese", "french"} <= covered


def test_a_rule_in_a_parameter_survives_the_whole_catalog() -> None:
    """The same law through the catalog compressor (the C walker when built)."""
    rule = "Der Wert muss positiv sein."
    catalog = {"tools": [{"name": "weather", "description": description("en", CONTROL["en"]),
                          "inputSchema": {"type": "object", "properties": {
                              "radius": {"type": "number", "description": description("de", rule)}}}}]}
    out, result = compress(orjson.dumps(catalog))
    assert result.status == "ok"
    tool = orjson.loads(out)["tools"][0]
    assert rule in tool["inputSchema"]["properties"]["radius"]["description"]
    assert CONTROL["en"] not in tool["description"]
