#!/usr/bin/perl
# vhostfs hookscript for Proxmox VE: one vhostfs per virtio-fs share of a VM.
#
# Proxmox calls it as `vhostfs-hook.pl <vmid> <phase>`. At pre-start it starts, for each share
# of /etc/vhostfs/proxmox/<vmid>.conf, a transient systemd service
# vhostfs-<vmid>-<share>.service serving /run/vhostfs/<vmid>-<share>.sock (systemd-run waits
# for vhostfs's READY=1, so the socket listens before QEMU starts); at post-stop it stops them.
#
# /etc/vhostfs/proxmox/<vmid>.conf, one share a line ('#' starts a comment):
#   share NAME DIR [extra vhostfs arguments]
# e.g.
#   share data /srv/data --cache=auto --xattr
#
# Environment (for tests and unusual layouts): VHOSTFS_BIN (/usr/bin/vhostfs),
# VHOSTFS_PROXMOX_CONF (/etc/vhostfs/proxmox), VHOSTFS_RUN_DIR (/run/vhostfs).
# See contrib/proxmox/README.md for the VM's args: line.

use strict;
use warnings;

my $bin = $ENV{VHOSTFS_BIN} // '/usr/bin/vhostfs';
my $conf_dir = $ENV{VHOSTFS_PROXMOX_CONF} // '/etc/vhostfs/proxmox';
my $run_dir = $ENV{VHOSTFS_RUN_DIR} // '/run/vhostfs';

my ($vmid, $phase) = @ARGV;
die "usage: $0 <vmid> <phase>\n" if !defined($phase);
die "vhostfs-hook: invalid vmid '$vmid'\n" if $vmid !~ /^\d+$/;

# The shares of VM $vmid: a list of [name, dir, extra args...]; none without a config file.
sub read_shares {
    my $file = "$conf_dir/$vmid.conf";
    return () if !-e $file;
    open(my $fh, '<', $file) or die "vhostfs-hook: $file: $!\n";
    my @shares;
    while (my $line = <$fh>) {
        $line =~ s/#.*//;
        my @words = split(' ', $line);
        next if !@words;
        my ($kw, $name, $dir, @extra) = @words;
        die "vhostfs-hook: $file line $.: expected 'share NAME DIR [args]'\n"
            if $kw ne 'share' || !defined($dir);
        die "vhostfs-hook: $file line $.: share name '$name' may use only A-Z a-z 0-9 _ . -\n"
            if $name !~ /^[A-Za-z0-9_.-]+$/;
        die "vhostfs-hook: $file line $.: $dir is not a directory\n" if !-d $dir;
        push @shares, [$name, $dir, @extra];
    }
    close($fh);
    return @shares;
}

sub unit { my ($name) = @_; return "vhostfs-$vmid-$name.service"; }

# Runs a command; dies on failure unless $may_fail.
sub run {
    my ($may_fail, @cmd) = @_;
    print "vhostfs-hook: @cmd\n";
    system(@cmd) == 0 || $may_fail
        or die "vhostfs-hook: '@cmd' failed (exit " . ($? >> 8) . ")\n";
}

if ($phase eq 'pre-start') {
    my @shares = read_shares();
    mkdir($run_dir, 0755) if @shares && !-d $run_dir;
    for my $share (@shares) {
        my ($name, $dir, @extra) = @$share;
        my $unit = unit($name);
        # A unit left from an earlier run (a crash) would block the name.
        run(1, 'systemctl', 'stop', $unit);
        run(1, 'systemctl', 'reset-failed', $unit);
        run(0, 'systemd-run', "--unit=$unit",
            "--description=vhostfs share $name of VM $vmid",
            '--property=Type=notify', '--collect', '--',
            $bin, "--socket-path=$run_dir/$vmid-$name.sock", "--shared-dir=$dir",
            '--syslog', @extra);
    }
} elsif ($phase eq 'post-stop') {
    # vhostfs exits by itself when QEMU disconnects; stop whatever is left.
    run(1, 'systemctl', 'stop', unit($_->[0])) for read_shares();
}
exit(0);
