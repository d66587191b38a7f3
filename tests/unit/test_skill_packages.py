"""Skill package validation (SPEC S-04): SKILL.md at the root with a YAML frontmatter
(name <= 64, a slug; description <= 1024), only safe relative paths, bounded sizes."""

from __future__ import annotations

import stat

import pytest
from weft_contracts.skill_packages import (
    MAX_FILE_BYTES,
    MAX_FILES,
    PackageRejected,
    PackageTooLarge,
    SkillFile,
    build_package,
    package_from_zip,
    package_to_zip,
    parse_frontmatter,
)

from tests.skill_kit import GREETER_SCRIPT, greeter_zip, make_zip, skill_md, symlink_zip

REG = stat.S_IFREG | 0o644


def test_a_zip_becomes_a_package_with_its_executable_bits() -> None:  # SPEC S-04
    package = package_from_zip(greeter_zip())
    assert package.name == "greeter"
    assert package.description == "Greets people by name."
    assert [f.path for f in package.files] == ["SKILL.md", "scripts/greet.sh"]
    script = package.file("scripts/greet.sh")
    assert script is not None and script.executable and script.content == GREETER_SCRIPT
    skill = package.file("SKILL.md")
    assert skill is not None and not skill.executable


def test_a_zipped_folder_is_unwrapped_and_round_trips() -> None:  # SPEC S-04
    package = package_from_zip(greeter_zip(folder="greeter/"))
    assert [f.path for f in package.files] == ["SKILL.md", "scripts/greet.sh"]
    again = package_from_zip(package_to_zip(package))
    assert again == package and again.digest == package.digest


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        ("../evil.sh", "leaves the package"),
        ("scripts/../../evil.sh", "leaves the package"),
        ("/etc/cron.d/evil", "absolute"),
        ("C:/evil.bat", "absolute"),
        ("scripts\\evil.sh", "contains"),
        ("scripts/$(reboot).sh", "segment"),
    ],
)
def test_zip_entries_outside_the_folder_are_refused(entry: str, reason: str) -> None:
    # SPEC S-04: zip slip; nothing of the archive is taken when one entry is bad.
    data = make_zip([("SKILL.md", skill_md("slip"), REG), (entry, b"x", REG)])
    with pytest.raises(PackageRejected, match=reason):
        package_from_zip(data)


def test_symlink_and_device_entries_are_refused() -> None:  # SPEC S-04
    with pytest.raises(PackageRejected, match="symlink"):
        package_from_zip(symlink_zip())
    fifo = make_zip([("SKILL.md", skill_md("fifo"), REG), ("pipe", b"", stat.S_IFIFO | 0o644)])
    with pytest.raises(PackageRejected, match="not a regular file"):
        package_from_zip(fifo)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("# no frontmatter\n", "start with a YAML frontmatter"),
        ("---\nname: x\ndescription: y\n", "not closed"),
        ("---\nname: [unclosed\n---\n", "not valid YAML"),
        ("---\n- a list\n---\n", "mapping"),
        ("---\ndescription: no name\n---\n", "'name'"),
        ("---\nname: nodesc\n---\n", "'description'"),
        ("---\nname: Has Spaces\ndescription: d\n---\n", "slug"),
        ("---\nname: ../up\ndescription: d\n---\n", "slug"),
        (f"---\nname: {'a' * 65}\ndescription: d\n---\n", "at most 64"),
        (f"---\nname: long\ndescription: {'d' * 1025}\n---\n", "at most 1024"),
    ],
)
def test_bad_frontmatter_is_refused_with_its_reason(text: str, reason: str) -> None:
    with pytest.raises(PackageRejected, match=reason):  # SPEC S-04 limits
        parse_frontmatter(text)


def test_the_limits_are_inclusive() -> None:  # SPEC S-04: name <= 64, description <= 1024
    name, description = parse_frontmatter(f"---\nname: {'a' * 64}\ndescription: {'d' * 1024}\n---")
    assert len(name) == 64 and len(description) == 1024


def test_a_package_needs_skill_md_at_its_root() -> None:
    with pytest.raises(PackageRejected, match=r"no SKILL\.md"):
        build_package([SkillFile("docs/SKILL.md", skill_md("nested"))])
    with pytest.raises(PackageRejected, match="twice"):
        build_package([SkillFile("SKILL.md", skill_md("a")), SkillFile("./SKILL.md", b"x")])
    with pytest.raises(PackageRejected, match="UTF-8"):
        build_package([SkillFile("SKILL.md", b"\xff\xfe---")])


def test_sizes_and_counts_are_capped_by_what_is_read() -> None:  # SPEC S-04
    big = [SkillFile("SKILL.md", skill_md("big")), SkillFile("blob", b"0" * (MAX_FILE_BYTES + 1))]
    with pytest.raises(PackageTooLarge, match="at most"):
        build_package(big)
    many = [SkillFile("SKILL.md", skill_md("many"))]
    many += [SkillFile(f"f{i}", b"") for i in range(MAX_FILES)]
    with pytest.raises(PackageTooLarge, match="more than"):
        build_package(many)
    # A zip bomb: tiny compressed, over the cap once read (the declared size is not trusted).
    bomb = make_zip(
        [("SKILL.md", skill_md("bomb"), REG), ("zeros", b"\0" * (MAX_FILE_BYTES * 2), REG)]
    )
    with pytest.raises(PackageTooLarge):
        package_from_zip(bomb)


def test_garbage_is_not_a_zip() -> None:
    with pytest.raises(PackageRejected, match="not a valid zip"):
        package_from_zip(b"PK\x03\x04 certainly not a zip")
