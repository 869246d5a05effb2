"""A prompt read as one of a model's known names (names.json beside the weights)."""

import json

import pytest

from jacobigen.core.errors import WeightsError
from jacobigen.models import embedded as E
from jacobigen.models.names import KnownNames

NAMES = {
    "names": ["grinning face", "red heart", "cat face", "cat", "red apple", "green apple", "sun", "fox", "snowflake"],
    "aliases": {"apple": "red apple", "smiley": "grinning face", "snow": "snowflake"},
    "keywords": {"grinning face": ["happy", "grin"], "red heart": ["love"], "sun": ["sunny", "bright"]},
}


@pytest.fixture
def known(tmp_path):
    path = tmp_path / "names.json"
    path.write_text(json.dumps(NAMES))
    return KnownNames.load(path, E.caption_words)


@pytest.mark.parametrize(
    "prompt, name",
    [
        ("grinning face", "grinning face"),  # a name as it is
        ("Red Heart!", "red heart"),  # read as words
        ("a red cat", "cat"),  # all of "cat" beats half of "red heart"
        ("apple", "red apple"),  # an alias
        ("green apple", "green apple"),  # both words beat the alias's one
        ("a red fox in snow", "fox"),  # equal fits: the one the prompt names first
        ("cat face", "cat face"),  # two words of "cat face" beat one of "cat"
        ("happy", "grinning face"),  # no name's word: the keywords decide
        ("something sunny", "sun"),
    ],
)
def test_a_prompt_draws_the_known_name_that_fits_it(known, prompt, name):
    assert known.fit(prompt) == name


def test_ties_go_to_the_name_listed_first(known):
    assert known.fit("red") == "red heart"  # half of red heart, half of red apple: listed first


def test_notes_say_what_is_drawn_and_what_is_not_read(known):
    assert known.note("red heart") is None
    assert known.note("the red heart") is None  # stopwords carry no name
    assert known.note("apple") == "draws it as its known name 'red apple'"
    assert known.note("a red cat") == "draws it as its known name 'cat' (not reading 'red')"


def test_a_prompt_with_no_known_word_names_the_closest_known_names(known):
    assert known.fit("qwerty") is None
    note = known.note("grining fase")
    assert note.startswith("knows none of its words") and "'grinning face'" not in note
    assert known.closest("grining fase")[0] == "grinning face"
    assert "grinning face" in note


def test_the_folder_with_names_json_reads_prompts_as_names(tmp_path):
    (tmp_path / "words.json").write_text(json.dumps({"words": ["red", "heart", "cat", "apple", "grinning", "face"]}))
    (tmp_path / "names.json").write_text(json.dumps(NAMES))
    reader = E.captions_for(tmp_path)
    assert isinstance(reader, E.NamedCaptions)
    assert reader.tokens("apple") == reader.tokens("red apple") == E.WordCaptions(reader.words).tokens("red apple")
    assert reader.tokens("a red cat") == E.WordCaptions(reader.words).tokens("cat")
    assert reader.tokens("qwerty") == E.WordCaptions(reader.words).tokens("qwerty")  # read as it is: UNK
    assert "closest known" in reader.note("qwerty")


@pytest.mark.parametrize(
    "text, match",
    [
        ("[1, 2]", "not a names.json"),
        ('{"names": []}', "non-empty list"),
        ('{"names": ["sun"], "aliases": {"moon": "crescent moon"}}', "unknown names"),
    ],
)
def test_a_broken_names_json_is_a_weights_error(tmp_path, text, match):
    (tmp_path / "names.json").write_text(text)
    with pytest.raises(WeightsError, match=match):
        KnownNames.load(tmp_path / "names.json", E.caption_words)
